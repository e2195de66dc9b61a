#!/bin/bash
# Whole process trees die with their worker and with muster (docs/SECURITY.md "Process trees").
# Each worker starts three grandchildren: (1) `setsid sleep` (own session, child of the
# worker), (2) a double-forked sleep (worker's session, orphaned), (3) setsid + double fork
# (own session, orphaned). Checked for both mechanisms (agent/proctree.h):
#   a) kill -9 of muster: within 5 s no grandchild is left (fallback: only (2), by design)
#   b) a worker fails, --max-restarts 1: attempt 1's workers find attempt 0's grandchildren gone
#      when they start
#   c) normal exit: no grandchild is left when muster has exited
# The fallback is forced with MUSTER_CGROUP_ROOT=/nonexistent and needs no privileges; the
# cgroup v2 path needs root and a writable cgroup2 mount (else exit 77 after the fallback).
. "$(dirname "$0")/lib.sh"

TAG=$RANDOM$RANDOM # argv marker: sleep 1000.<TAG><rank><attempt><kind>
PTW="$T/pt_worker.sh"
cat > "$PTW" <<'EOF'
#!/bin/bash
# pt_worker.sh DIR TAG MODE: MODE hold (sleep), fail (rank 0 exits 1 in attempt 0), exit (0)
d=$1 tag=$2 mode=$3 r=$RANK n=$TORCHELASTIC_RESTART_COUNT
alive() { # PID: a live (non-zombie) grandchild of this test
    grep -qaF "1000.$tag" "/proc/$1/cmdline" 2>/dev/null &&
        [ "$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null)" != Z ]
}
if [ "$n" -gt 0 ]; then # are the previous attempt's grandchildren gone?
    left=""
    for p in $(cat "$d"/pid.*."$((n - 1))".* 2>/dev/null); do
        alive "$p" && left="$left $p"
    done
    echo "$left" > "$d/left.$r.$n"
fi
m="1000.$tag$r$n"
setsid sleep "${m}1" < /dev/null > /dev/null 2>&1 &
echo $! > "$d/pid.$r.$n.1"
(sleep "${m}2" < /dev/null > /dev/null 2>&1 & echo $! > "$d/pid.$r.$n.2")
setsid sh -c "sleep ${m}3 < /dev/null > /dev/null 2>&1 & echo \$! > $d/pid.$r.$n.3"
: > "$d/ready.$r.$n"
case "$mode" in
hold) exec sleep 60 ;;
fail) [ "$r" = 0 ] && [ "$n" = 0 ] && { sleep 0.3; exit 1; }
      [ "$n" = 0 ] && exec sleep 60 ;;
esac
exit 0
EOF
chmod +x "$PTW"

# pids_of D ATTEMPT KINDS: the recorded grandchildren of that attempt, of the given kinds
pids_of() {
    local k
    for k in $3; do cat "$1"/pid.*."$2"."$k" 2>/dev/null; done
}

# alive_of PIDS: those that still run this test's sleeps
alive_of() {
    local p
    for p in "$@"; do
        if grep -qaF "1000.$TAG" "/proc/$p/cmdline" 2>/dev/null &&
            [ "$(awk '/^State:/ {print $2}' "/proc/$p/status" 2>/dev/null)" != Z ]; then
            echo "$p"
        fi
    done
}

none_alive() { [ -z "$(alive_of "$@")" ]; }

# mechanism ERRFILE: which path ran, from the MUSTER_DEBUG_PROCTREE line
mechanism() {
    if grep -q 'process trees: cgroup v2' "$1"; then echo cgroup
    elif grep -q 'process trees: fallback' "$1"; then echo fallback
    else echo unknown; fi
}

# scenario_kill9 NAME KILLED_KINDS SURVIVING_KINDS [VAR=VALUE...]
scenario_kill9() {
    local name=$1 kinds=$2 survivors=$3 D="$T/$1-kill9"
    shift 3
    mkdir -p "$D"
    ERRF="$T/$name-kill9.err" mrun_bg "$@" MUSTER_DEBUG_PROCTREE=1 -- run --standalone \
        --nproc-per-node 2 --no-python "$PTW" "$D" "$TAG" hold
    wait_for 30 files_at_least 2 "$D/ready.*" || { ERRF="$T/$name-kill9.err" show_output; fail "$name: workers did not start"; }
    local all
    all=$(pids_of "$D" 0 "1 2 3")
    [ "$(alive_of $all | wc -l)" = 6 ] || fail "$name: expected 6 grandchildren, found: $(alive_of $all)"
    note "$name: mechanism $(mechanism "$T/$name-kill9.err")"
    kill -9 "$MPID"
    wait "$MPID" 2>/dev/null
    local gone
    gone=$(pids_of "$D" 0 "$kinds")
    wait_for 5 none_alive $gone || fail "$name: kill -9 of muster left grandchildren (kinds $kinds):
$(describe_pids $(alive_of $gone))"
    if [ -n "$survivors" ]; then
        local s
        s=$(alive_of $(pids_of "$D" 0 "$survivors"))
        note "$name: after kill -9, $(echo $s | wc -w) setsid()'d grandchildren survive (documented limit)"
        [ -n "$s" ] && kill -9 $s 2>/dev/null
    fi
    return 0
}

# scenario_restart NAME [VAR=VALUE...]
scenario_restart() {
    local name=$1 D="$T/$1-restart" f
    shift
    mkdir -p "$D"
    ERRF="$T/$name-restart.err" mrun "$@" MUSTER_DEBUG_PROCTREE=1 -- run --standalone \
        --nproc-per-node 2 --max-restarts 1 --no-python "$PTW" "$D" "$TAG" fail
    ERRF="$T/$name-restart.err" expect_rc "$name: rank 0 fails once, --max-restarts 1" 0
    for f in "$D/left.0.1" "$D/left.1.1"; do
        [ -f "$f" ] || fail "$name: attempt 1 did not run ($(ls "$D"))"
        [ -z "$(tr -d ' \n' < "$f")" ] || fail "$name: attempt 0's grandchildren still ran when attempt 1 started: $(cat "$f")"
    done
    local all
    all=$(pids_of "$D" 1 "1 2 3")
    [ "$(echo $all | wc -w)" = 6 ] || fail "$name: attempt 1 recorded $(echo $all | wc -w) grandchildren, not 6"
    none_alive $all $(pids_of "$D" 0 "1 2 3") || fail "$name: grandchildren left after the restarted job ended:
$(describe_pids $(alive_of $all))"
}

# scenario_exit NAME [VAR=VALUE...]
scenario_exit() {
    local name=$1 D="$T/$1-exit" dir
    shift
    mkdir -p "$D"
    ERRF="$T/$name-exit.err" mrun "$@" MUSTER_DEBUG_PROCTREE=1 -- run --standalone \
        --nproc-per-node 2 --no-python "$PTW" "$D" "$TAG" exit
    ERRF="$T/$name-exit.err" expect_rc "$name: normal exit" 0
    # checked at once: muster kills the trees before it exits, nothing is left to poll for
    none_alive $(pids_of "$D" 0 "1 2 3") || fail "$name: grandchildren left after a normal exit:
$(describe_pids $(alive_of $(pids_of "$D" 0 "1 2 3")))"
    dir=$(sed -n 's/.*process trees: cgroup v2 \([^ ]*\) .*/\1/p' "$T/$name-exit.err")
    [ -z "$dir" ] || [ ! -e "$dir" ] || fail "$name: cgroup $dir left behind"
}

# --- the fallback: no cgroup ----------------------------------------------------------------
NOCG=MUSTER_CGROUP_ROOT=/nonexistent
scenario_exit fallback "$NOCG"
[ "$(mechanism "$T/fallback-exit.err")" = fallback ] || fail "MUSTER_CGROUP_ROOT=/nonexistent did not force the fallback: $(grep 'process trees' "$T/fallback-exit.err")"
note "fallback: $(grep -o 'process trees: .*' "$T/fallback-exit.err")"
scenario_restart fallback "$NOCG"
# after kill -9 the fallback's reaper kills the workers' sessions only: (2) dies, (1) and (3)
# called setsid() and survive (docs/SECURITY.md, "Process trees")
scenario_kill9 fallback "2" "1 3" "$NOCG"

# --- cgroup v2 ------------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || skip "fallback passed; the cgroup v2 path needs root (cgroup2 is not delegated to this user)"
scenario_exit cgroup
if [ "$(mechanism "$T/cgroup-exit.err")" != cgroup ]; then
    skip "fallback passed; no usable cgroup v2 here: $(grep -o 'process trees: .*' "$T/cgroup-exit.err")"
fi
note "cgroup: $(grep -o 'process trees: .*' "$T/cgroup-exit.err")"
scenario_restart cgroup
scenario_kill9 cgroup "1 2 3" ""
assert_no_marked_left "cgroup: anything of muster's after kill -9" 5
dir=$(sed -n 's/.*process trees: cgroup v2 \([^ ]*\) .*/\1/p' "$T/cgroup-kill9.err")
wait_for 5 test ! -e "$dir" || fail "cgroup: the reaper did not remove $dir after kill -9"

exit 0
