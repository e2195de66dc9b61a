#!/bin/bash
# Local safety on the node (docs/SECURITY.md "Files on the node"). muster runs
# as root; another local user (nobody) plants symlinks and directories in a shared --log-dir,
# --checkpoint-dir and $TMPDIR, pointing at a root-owned victim file and directory. muster must
# either refuse with one line and exit 2, or write safely elsewhere; the victims never change.
# Run ids that would escape --log-dir or forge log lines are refused the same way.
# Skips (77) unless root with setpriv (util-linux) and a `nobody` user.
. "$(dirname "$0")/lib.sh"

need_evil_user

chmod 755 "$T" # the other user must reach the shared directories inside
V="$T/victim"
echo precious > "$V"
chmod 644 "$V"
VDIR="$T/victimdir" # a root-owned directory a planted link could lead muster into
mkdir "$VDIR"
victims_intact() {
    [ "$(cat "$V")" = precious ] || fail "$1: the victim file changed: $(head -c 200 "$V")"
    [ -z "$(ls -A "$VDIR")" ] || fail "$1: muster wrote into the victim directory: $(ls -A "$VDIR")"
}

# refused CONTEXT PATTERN: exit 2 and exactly one line on stderr, containing PATTERN
refused() {
    expect_rc "$1" 2
    [ "$(wc -l < "$T/err")" = 1 ] || { show_output; fail "$1: expected one line on stderr"; }
    grep -qF -- "$2" "$T/err" || { show_output; fail "$1: stderr lacks '$2'"; }
    victims_intact "$1"
}

shared_dir() { # shared_dir PATH MODE: a directory of root's anyone may write into
    mkdir -p "$1"
    chmod "$2" "$1"
}

ID=job-$$
D="$T/dump"
mkdir -p "$D"
job() { # job ARGS...: one worker of job $ID, which dumps its environment to $D
    IT_TIMEOUT=60 mrun -- run --nnodes 1 --nproc-per-node 1 --rdzv-id "$ID" "$@" \
        --no-python "$WORKER" dump "$D"
}

# 1. A world-writable --log-dir without the sticky bit: anyone could swap what muster creates.
L="$T/ww"
shared_dir "$L" 0777
job --log-dir "$L"
refused "--log-dir mode 0777" "refusing --log-dir $L: writable by others (mode 0777)"
[ -z "$(ls -A "$L")" ] || fail "--log-dir mode 0777: muster created $(ls -A "$L")"
job --log-dir "$L/sub/dir" # a parent counts too
refused "--log-dir below mode 0777" "$L is writable by others (mode 0777)"

# 2. Sticky and world-writable (a /tmp-like shared log dir): usable, but the RUN_ID entry that
#    the other user planted is not.
S="$T/sticky"
shared_dir "$S" 1777
as_evil ln -s "$VDIR" "$S/$ID"
job --log-dir "$S"
refused "planted RUN_ID symlink" "a symlink owned by uid $EVIL_UID, not by you (uid 0)"
rm "$S/$ID"
as_evil mkdir -p "$S/$ID/attempt_0/0"
as_evil chmod -R 0777 "$S/$ID"
as_evil ln -s "$V" "$S/$ID/attempt_0/0/stdout.log"
as_evil ln -s "$V" "$S/$ID/attempt_0/0/stderr.log"
job --log-dir "$S" --tee 3
refused "planted RUN_ID directory" "owned by uid $EVIL_UID, not by you (uid 0)"
rm -rf "${S:?}/$ID"

# ... and with nothing planted the job runs there, in directories of root's that nobody else can
# write; a re-run with the same --log-dir gets RUN_ID.1 and leaves the first run's files alone.
for n in 1 2; do
    job --log-dir "$S" --tee 3
    expect_rc "sticky --log-dir, run $n" 0
    R="$S/$ID"
    [ "$n" = 2 ] && R="$S/$ID.1"
    grep -q "hello-from-rank-0" "$R/attempt_0/0/stdout.log" ||
        fail "sticky --log-dir, run $n: $R/attempt_0/0/stdout.log lacks the output"
    grep -qF "worker logs in $R" "$T/err" || fail "sticky --log-dir, run $n: $R not printed"
done
[ "$(grep -c hello-from-rank-0 "$S/$ID/attempt_0/0/stdout.log")" = 1 ] ||
    fail "the re-run wrote into the first run's stdout.log"
for p in "$S/$ID" "$S/$ID/attempt_0" "$S/$ID/attempt_0/0" "$S/$ID.1"; do
    expect_eq "owner and mode of $p" "0 755" "$(stat -c '%u %a' "$p")"
done
# the other user now plants next to root's run directory: nothing of it is used
as_evil ln -s "$V" "$S/$ID.tmp"
job --log-dir "$S" --tee 3
expect_rc "sticky --log-dir, third run" 0
victims_intact "sticky --log-dir, third run"

# 3. --checkpoint-dir: world-writable refused; in a sticky one, a planted .muster/ (the registry's
#    directory) or a planted symlink to a root-owned directory is refused.
C="$T/ckww"
shared_dir "$C" 0777
job --checkpoint-dir "$C"
refused "--checkpoint-dir mode 0777" "refusing --checkpoint-dir $C: writable by others (mode 0777)"
[ -z "$(ls -A "$C")" ] || fail "--checkpoint-dir mode 0777: muster created $(ls -A "$C")"
C="$T/cksticky"
shared_dir "$C" 1777
as_evil mkdir "$C/ckpt"
as_evil chmod 0777 "$C/ckpt"
job --checkpoint-dir "$C/ckpt"
refused "--checkpoint-dir of another user" "owned by uid $EVIL_UID, not by you (uid 0)"
as_evil ln -s "$VDIR" "$C/link"
job --checkpoint-dir "$C/link"
refused "--checkpoint-dir planted symlink" "a symlink owned by uid $EVIL_UID"
mkdir -m 0755 "$C/mine" # root's own checkpoint dir in the shared one: registry written safely
as_evil ln -s "$V" "$C/registry.json"
job --checkpoint-dir "$C/mine"
expect_rc "own --checkpoint-dir in a sticky dir" 0
[ -d "$C/mine/.muster" ] || fail "no .muster directory in $C/mine"
expect_eq "owner and mode of .muster" "0 700" "$(stat -c '%u %a' "$C/mine/.muster")"
victims_intact "own --checkpoint-dir in a sticky dir"

# 4. $TMPDIR (no --log-dir: a private directory there) must be trusted too; an empty TMPDIR means
#    /tmp, not / (it once made /muster-heartbeats-PID).
TW="$T/tmpww"
shared_dir "$TW" 0777
IT_TIMEOUT=60 mrun TMPDIR="$TW" -- run --nnodes 1 --nproc-per-node 1 --rdzv-id "$ID" \
    --no-python "$WORKER" dump "$D"
refused "\$TMPDIR mode 0777" "refusing \$TMPDIR $TW: writable by others (mode 0777)"
before=$(ls -d /muster-* 2> /dev/null | wc -l)
IT_TIMEOUT=60 mrun TMPDIR= -- run --nnodes 1 --nproc-per-node 1 --rdzv-id "$ID" \
    --hang-timeout 30 --log-dir /dev/null --no-python "$WORKER" dump "$D"
expect_rc "TMPDIR='' with --hang-timeout" 0
expect_eq "entries /muster-* created in /" "$before" "$(ls -d /muster-* 2> /dev/null | wc -l)"

# 5. Run ids: one character set (common/ids.h). Each bad one exits 2 with one line, the id
#    shown escaped, and nothing is created (inside or outside --log-dir).
L="$T/ids/logs"
mkdir -p "$L"
for bad in "../x" "a/b" ".." $'a\nmuster: forged' $'esc\e[2Jid' $'caf\xc3\xa9' $'\xff\xfe'; do
    IT_TIMEOUT=30 mrun -- run --nnodes 1 --nproc-per-node 1 --rdzv-id "$bad" --log-dir "$L" \
        --no-python "$WORKER" dump "$D"
    shown=$(printf '%q' "$bad")
    refused "--rdzv-id $shown" "--rdzv-id '"
    grep -q $'\e' "$T/err" && fail "--rdzv-id $shown: an ESC reached the terminal"
    [ -z "$(ls -A "$T/ids/logs")" ] || fail "--rdzv-id $shown: created $(ls -A "$L")"
    [ "$(ls -A "$T/ids")" = logs ] || fail "--rdzv-id $shown: created $(ls -A "$T/ids")"
done
IT_TIMEOUT=30 mrun PET_RDZV_ID=../x -- run --nnodes 1 --nproc-per-node 1 --log-dir "$L" \
    --no-python "$WORKER" dump "$D"
refused "PET_RDZV_ID=../x" "PET_RDZV_ID '../x' has '/'"
IT_TIMEOUT=30 mrun SLURM_JOB_ID=../x SLURM_NNODES=1 -- run --nproc-per-node 1 --log-dir "$L" \
    --no-python "$WORKER" dump "$D"
refused "SLURM_JOB_ID=../x" "SLURM_JOB_ID=../x is malformed"
IT_TIMEOUT=30 mrun -- status --rdzv-endpoint 127.0.0.1:1 --rdzv-id "a/b"
refused "status --rdzv-id a/b" "--rdzv-id 'a/b' has '/'"
IT_TIMEOUT=30 mrun -- preflight --nnodes 1 --nproc-per-node 1 --rdzv-id "../x"
refused "preflight --rdzv-id ../x" "--rdzv-id '../x' has '/'"
# ids that torchrun users and Slurm produce still work
for good in 12345 12345_7 none 6f1c7b3e-2d4a-4f7e-9a0b-1c2d3e4f5a6b; do
    IT_TIMEOUT=60 mrun -- run --nnodes 1 --nproc-per-node 1 --rdzv-id "$good" --log-dir "$L" \
        --no-python "$WORKER" dump "$D"
    expect_rc "--rdzv-id $good" 0
done

victims_intact "end of test"
assert_no_marked_left "end of test" 5
exit 0
