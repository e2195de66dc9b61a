#!/bin/bash
# Removal in a shared --checkpoint-dir (docs/SECURITY.md "Files on the node").
# muster runs as root with --checkpoint-dir a sticky world-writable root-owned directory (mode
# 1777, like /tmp: mc_dir_open accepts it; other users may add names but not rename or remove
# root's). A hostile local user (nobody) plants names there that muster removes: leftovers of a
# dead receiving agent of this host (.muster-replica-HOST.PID.*, swept at start) and entries named
# like checkpoints (recorded at start, then pruned by --keep-checkpoints 1), as symlinks to a
# root-owned file and directory outside and as directories of nobody's whose insides are swapped
# for such symlinks while muster runs. What nobody can reach is only their own entries at the top
# of the directory (root's checkpoints and root's own leftovers are 0755/0644 root's).
#
# Asserted: nothing outside the directory is removed or changed; every entry of nobody's stays
# and is reported ("not removing NAME: owned by uid U, not by you (uid 0)", "checkpoint NAME not
# pruned"); root's own leftovers (a tree, a symlink) and old checkpoints (a directory, a file)
# are still removed. Skips (77) unless root with setpriv (util-linux) and a `nobody` user.
. "$(dirname "$0")/ft.sh"

need_evil_user
# evil_bg CMD...: as_evil in the background with the test's marker (the EXIT trap kills it) and
# no pipe of the test's held open; sets EVIL to its pid (exec: no subshell in between)
evil_bg() {
    (exec env MUSTER_IT_MARK="$MARK" setpriv --reuid="$EVIL_UID" --regid="$EVIL_GID" \
        --clear-groups "$@" < /dev/null > /dev/null 2>&1) &
    EVIL=$!
    IT_BG_PIDS="$IT_BG_PIDS $EVIL"
}

chmod 755 "$T" # nobody must reach the shared directory inside
V="$T/victim"
echo precious > "$V"
chmod 644 "$V"
VDIR="$T/victimdir" # root's, with a file a removal through a link would take
mkdir "$VDIR"
echo keep > "$VDIR/keep"
# inode, links, size, mtime, mode, owner and content of everything outside the directory
victims() {
    stat -c '%n %i %h %s %Y %a %u' "$V" "$VDIR" "$VDIR/keep"
    cat "$V" "$VDIR/keep"
    ls -A "$VDIR"
}
BEFORE=$(victims)
victims_intact() {
    [ "$(victims)" = "$BEFORE" ] || fail "$1: outside the directory changed:
$(victims)
was:
$BEFORE"
}

C="$T/shared"
mkdir "$C"
chmod 1777 "$C"
W="$T/w"
mkdir "$W"
HOST=$(tr -cd 'A-Za-z0-9-' < /proc/sys/kernel/hostname | cut -c1-63)
[ -n "$HOST" ] || HOST=h
DEAD=$(sh -c 'echo $$') # a pid that exited: its leftovers are swept
kill -0 "$DEAD" 2> /dev/null && skip "pid $DEAD was reused at once"
P=".muster-replica-$HOST.$DEAD"

# nobody's plants: leftovers of a dead agent ...
as_evil ln -s "$V" "$C/$P.lnkfile"
as_evil ln -s "$VDIR" "$C/$P.lnkdir"
as_evil mkdir -p "$C/$P.theirs/sub" "$C/$P.swap/sub"
as_evil sh -c "echo t > '$C/$P.theirs/sub/f'"
# ... and "checkpoints": a directory and a file, which muster refuses to record (not its user's)
as_evil mkdir -p "$C/ckpt_0/sub"
as_evil sh -c "echo t > '$C/ckpt_0/sub/f' && echo x > '$C/ckpt_1.pt'"
# root's own: a dead agent's leftover tree and symlink (removed), an old directory checkpoint
mkdir -p "$C/$P.ours/a/b"
echo half > "$C/$P.ours/a/b/part"
ln -s "$V" "$C/$P.ourlink"
mkdir -p "$C/ckpt_2/shards"
echo 2 > "$C/ckpt_2/shards/0"

# The swaps: from before the first start (the sweep) to the end, nobody's .swap/sub and (once
# $T/go exists: after those were recorded as checkpoints) ckpt_0/sub and ckpt_1.pt flip between
# what they were and symlinks to the victims (ckpt_1.pt by rename over it: never missing). The
# single quotes are meant: the hostile bash expands its own arguments.
# shellcheck disable=SC2016
evil_bg bash -c '
C=$1 V=$2 VDIR=$3 P=$4 T=$5
flip_dir() { # flip_dir DIR: DIR/sub a directory <-> a symlink to VDIR
    mv -T "$1/sub" "$1/.sub" 2> /dev/null && ln -sfn "$VDIR" "$1/sub"
    rm -f "$1/sub" && mv -T "$1/.sub" "$1/sub" 2> /dev/null
}
while [ -d "$T" ] && [ ! -e "$T/stop" ]; do
    flip_dir "$C/$P.swap"
    [ -e "$T/go" ] || continue
    flip_dir "$C/ckpt_0"
    ln -sfn "$V" "$C/.l" && mv -T "$C/.l" "$C/ckpt_1.pt"
    echo x > "$C/.f" && mv -T "$C/.f" "$C/ckpt_1.pt"
done
' evil "$C" "$V" "$VDIR" "$P" "$T"
stop_evil() {
    : > "$T/stop"
    wait_for 10 pid_gone "$EVIL" || fail "the hostile loop did not stop"
}

job() { # job CKPT: one run, rank 0 writes CKPT into the shared directory (ft_worker.sh)
    IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 1 \
        --checkpoint-dir "$C" --keep-checkpoints 1 --no-python "$FT_WORKER" ckpt "$W" "$1"
}
reported() { # reported RUN PATTERN
    grep -qF -- "$2" "$T/err" || { show_output 60; fail "$1: stderr lacks '$2'"; }
}
theirs_reported() { # theirs_reported RUN: every leftover of nobody's stays and is named
    local s
    for s in lnkfile lnkdir theirs swap; do
        reported "$1" "muster: not removing $P.$s: owned by uid $EVIL_UID, not by you (uid 0)"
    done
    grep -q "removed $P\.\(lnk\|theirs\|swap\)" "$T/err" && { show_output 60; fail "$1: removed nobody's leftover"; }
    for s in ckpt_0 ckpt_1.pt; do
        reported "$1" "muster: checkpoint $s not recorded: owned by uid $EVIL_UID, not by this agent's user (uid 0)"
    done
    grep -q "checkpoint ckpt_[01]\(\.pt\)\? recorded" "$T/err" && { show_output 60; fail "$1: recorded nobody's plant as a checkpoint"; }
}
theirs_there() { # theirs_there WHEN: nobody's entries, in either form of a swap
    local e
    for e in "$P.lnkfile" "$P.lnkdir" "$P.theirs/sub/f" "$P.swap" ckpt_0 ckpt_1.pt; do
        [ -e "$C/$e" ] || [ -L "$C/$e" ] || fail "$1: nobody's $e was removed"
    done
    for e in "$P.swap" ckpt_0; do
        # polled: the two tests are not atomic while the loop still swaps
        wait_for 5 sub_there "$C/$e" || fail "$1: nobody's $e/sub was removed"
    done
}
sub_there() { [ -e "$1/sub" ] || [ -e "$1/.sub" ]; }

# 1. The sweep at start (with .swap/sub flipping); root's ckpt_2 found there is recorded and
#    pruned once ckpt_3.pt lands; nobody's ckpt_0 and ckpt_1.pt are never recorded and stay.
job ckpt_3.pt
expect_rc "first run" 0
victims_intact "first run"
theirs_reported "first run"
theirs_there "first run"
reported "first run" "muster: removed $P.ours: a replica whose receiving agent (pid $DEAD) stopped"
reported "first run" "muster: removed $P.ourlink: a replica whose receiving agent (pid $DEAD) stopped"
[ -e "$C/$P.ours" ] || [ -L "$C/$P.ourlink" ] && fail "first run: root's leftovers are still there"
reported "first run" "muster: checkpoint ckpt_2 pruned (keeping 1, newest verified ckpt_3.pt)"
[ -e "$C/ckpt_2" ] && fail "first run: root's ckpt_2 was not pruned"
expect_eq "registry after the first run" "ckpt_3.pt" \
    "$(reg_names "$C" | tr '\n' ' ' | sed 's/ $//')"

# 2. Now ckpt_0/sub and ckpt_1.pt flip too; the second run sweeps again and prunes ckpt_3.pt,
#    refusing nobody's two again while they change under it.
: > "$T/go"
wait_for 10 test -L "$C/ckpt_1.pt" || fail "the hostile loop does not swap ckpt_1.pt"
job ckpt_4.pt
expect_rc "second run" 0
stop_evil
victims_intact "second run"
theirs_reported "second run"
theirs_there "second run"
reported "second run" "muster: checkpoint ckpt_3.pt pruned (keeping 1, newest verified ckpt_4.pt)"
[ -e "$C/ckpt_3.pt" ] && fail "second run: root's ckpt_3.pt was not pruned"
[ -f "$C/ckpt_4.pt" ] || fail "second run: ckpt_4.pt is gone"

assert_no_marked_left "end of test" 10
exit 0
