#!/bin/bash
# SIGTERM/SIGINT to muster: forwarded to every worker, muster waits for them and exits 128+signal;
# a worker ignoring the signal is SIGKILLed after --shutdown-timeout.
. "$(dirname "$0")/lib.sh"

N=3
for sig in TERM INT; do
    D="$T/$sig"; mkdir -p "$D"
    mrun_bg -- run --standalone --nproc-per-node $N --no-python "$WORKER" trap "$D"
    wait_for 30 files_at_least $N "$D/ready.*" || { show_output; fail "SIG$sig: workers did not start"; }
    kill -s "$sig" "$MPID"
    wait_rc "$MPID" 20
    want=$((128 + $(kill -l "$sig")))
    expect_rc "muster after SIG$sig" "$want"
    for r in $(seq 0 $((N - 1))); do
        [ -f "$D/sig.$r" ] || { show_output; fail "SIG$sig: rank $r never got a signal"; }
        expect_eq "signal seen by rank $r" "$sig" "$(cat "$D/sig.$r")"
    done
    # muster must only exit after its workers are gone
    assert_no_marked_left "muster exited on SIG$sig but workers remain" 0
done

# a worker that ignores SIGTERM is SIGKILLed after --shutdown-timeout 1
D="$T/ign"; mkdir -p "$D"
mrun_bg -- run --standalone --nproc-per-node 2 --shutdown-timeout 1 --no-python "$WORKER" ignore "$D"
wait_for 30 files_at_least 2 "$D/ready.*" || { show_output; fail "ignoring workers did not start"; }
t0=$(now_ms)
kill -TERM "$MPID"
wait_rc "$MPID" 15
el=$(( $(now_ms) - t0 ))
expect_rc "muster after SIGTERM with workers ignoring it" 143
[ "$el" -ge 900 ] || fail "muster exited after ${el} ms, before the 1 s shutdown timeout"
[ "$el" -lt 6000 ] || fail "muster took ${el} ms to SIGKILL workers with --shutdown-timeout 1"
# the workers' process groups were SIGKILLed: nothing of them may survive
assert_no_marked_left "after --shutdown-timeout 1" 3
note "SIGTERM-ignoring workers killed, muster exited after ${el} ms"
exit 0
