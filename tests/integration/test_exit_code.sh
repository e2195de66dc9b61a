#!/bin/bash
# Exit codes: a worker's own exit code (or 128+signal) when restarts are exhausted, a root-cause
# summary on stderr, and the surviving workers stopped at once.
. "$(dirname "$0")/lib.sh"

# rank 1 exits 7 while ranks 0 and 2 sleep 60 s
D="$T/w"; mkdir -p "$D"
t0=$(now_ms)
mrun -- run --standalone --nproc-per-node 3 --max-restarts 0 --no-python "$WORKER" exit "$D" 1 7
t1=$(now_ms)
expect_rc "rank 1 exits 7" 7
for w in 'root cause' 'rank' 'exit code'; do
    grep -q "$w" "$T/err" || { show_output; fail "stderr lacks '$w'"; }
done
grep -qE '^muster: +rank +: 1 \(local_rank 1\)' "$T/err" || { show_output; fail "root cause does not name rank 1 (local_rank 1)"; }
grep -qE '^muster: +exit code +: 7\b' "$T/err" || { show_output; fail "root cause does not say exit code 7"; }
grep -qE '^muster: +host +: ' "$T/err" || fail "root cause lacks the host line"
grep -qE '^muster: +time +: [0-9]{4}-[0-9]{2}-[0-9]{2}T' "$T/err" || fail "root cause lacks an ISO-8601 time"
grep -qE '^muster: job .* failed after 0 restart' "$T/err" || fail "stderr lacks 'job <id> failed after 0 restart(s)'"
# the sleepers (60 s) must have been stopped right away
el=$((t1 - t0))
[ "$el" -lt 15000 ] || fail "muster took ${el} ms: the other workers were not stopped promptly"
assert_no_marked_left "after rank 1 failed" 5
note "failure with 2 sleeping peers: muster returned after ${el} ms"

# a worker SIGKILLs itself -> 137
D="$T/k"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 2 --no-python "$WORKER" killself "$D" 0
expect_rc "rank 0 kills itself with SIGKILL" 137
grep -qE 'signal +: 9' "$T/err" || { show_output; fail "root cause does not report 'signal : 9 (SIGKILL)'"; }
grep -q 'SIGKILL' "$T/err" || fail "root cause does not name SIGKILL"
assert_no_marked_left "after rank 0 was SIGKILLed" 5

# a single worker
D="$T/x"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 1 --no-python "$WORKER" exit "$D" 0 42
expect_rc "single worker exits 42" 42

# success
D="$T/ok"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 2 --no-python "$WORKER" dump "$D"
expect_rc "all workers exit 0" 0
grep -q 'root cause' "$T/err" && fail "root-cause summary printed for a successful job"

assert_no_marked_left "end of test" 5
exit 0
