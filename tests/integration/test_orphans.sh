#!/bin/bash
# kill -9 of muster must not leave orphaned workers (torchrun does: workers run in their own
# session without PR_SET_PDEATHSIG).
. "$(dirname "$0")/lib.sh"

D="$T/w"; mkdir -p "$D"
mrun_bg -- run --standalone --nproc-per-node 3 --no-python "$WORKER" sleep "$D" 60
wait_for 30 files_at_least 3 "$D/ready.*" || { show_output; fail "workers did not start"; }
[ -n "$(marked_pids)" ] || fail "marker lookup finds no process although workers run"
kill -9 "$MPID"
wait "$MPID" 2>/dev/null
assert_no_marked_left "kill -9 of muster (polled 10 s)" 10

exit 0
