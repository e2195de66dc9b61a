#!/bin/bash
# Restart: rank 1 fails in attempt 0; with --max-restarts 2 the whole local group is restarted
# once, every worker of attempt 1 sees TORCHELASTIC_RESTART_COUNT=1, muster exits 0, says so on
# stderr, and --log-dir keeps the files of both attempts.
. "$(dirname "$0")/lib.sh"

D="$T/w"; L="$T/logs"
mkdir -p "$D" "$L"
mrun -- run --standalone --nproc-per-node 3 --max-restarts 2 --log-dir "$L" \
    --no-python "$WORKER" fail-once "$D" 1 1
expect_rc "rank 1 fails once, --max-restarts 2" 0

for r in 0 1 2; do
    [ -f "$D/env.$r.0" ] || fail "rank $r did not run in attempt 0 (files: $(ls "$D"))"
    [ -f "$D/env.$r.1" ] || fail "rank $r did not run in attempt 1 (files: $(ls "$D"))"
    expect_eq "rank $r attempt 1 TORCHELASTIC_RESTART_COUNT" 1 "$(envval "$D/env.$r.1" TORCHELASTIC_RESTART_COUNT)"
    expect_eq "rank $r TORCHELASTIC_MAX_RESTARTS" 2 "$(envval "$D/env.$r.1" TORCHELASTIC_MAX_RESTARTS)"
    grep -qxF "[rank$r]: hello-from-rank-$r attempt 1" "$T/out" || { show_output; fail "no output of rank $r in attempt 1"; }
done
[ "$(count_files "$D"/env.*.2)" = 0 ] || fail "a third attempt ran: $(ls "$D")"
grep -q 'restarting workers (restart 1/2)' "$T/err" || { show_output; fail "stderr lacks 'restarting workers (restart 1/2)'"; }
grep 'restarting workers' "$T/err" | grep -q 'rank 1' || fail "restart line does not name rank 1: $(grep 'restarting' "$T/err")"
grep 'restarting workers' "$T/err" | grep -q 'code 1' || fail "restart line does not give exit code 1: $(grep 'restarting' "$T/err")"

run_id=$(envval "$D/env.0.0" TORCHELASTIC_RUN_ID)
expect_eq "TORCHELASTIC_RUN_ID unchanged by the restart" "$run_id" "$(envval "$D/env.0.1" TORCHELASTIC_RUN_ID)"
for a in 0 1; do
    for r in 0 1 2; do
        for s in stdout stderr; do
            f="$L/$run_id/attempt_$a/$r/$s.log"
            [ -f "$f" ] || fail "missing $f (log dir: $(cd "$L" && find . | head -40))"
        done
        grep -q "hello-from-rank-$r attempt $a" "$L/$run_id/attempt_$a/$r/stdout.log" \
            || fail "attempt_$a/$r/stdout.log lacks the worker's output"
        grep -q "stderr-from-rank-$r attempt $a" "$L/$run_id/attempt_$a/$r/stderr.log" \
            || fail "attempt_$a/$r/stderr.log lacks the worker's stderr"
        expect_eq "rank $r attempt $a TORCHELASTIC_ERROR_FILE" "$L/$run_id/attempt_$a/$r/error.json" \
            "$(envval "$D/env.$r.$a" TORCHELASTIC_ERROR_FILE)"
    done
done
[ -d "$L/$run_id/attempt_2" ] && fail "attempt_2 exists although only one restart happened"

# Exhausted restarts: rank 1 fails in every attempt, --max-restarts 1 -> two attempts, exit 5.
D="$T/w2"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 2 --max-restarts 1 --no-python "$WORKER" exit "$D" 1 5
expect_rc "rank 1 always exits 5, --max-restarts 1" 5
[ -f "$D/env.0.1" ] && [ -f "$D/env.1.1" ] || fail "attempt 1 did not run (files: $(ls "$D"))"
[ -f "$D/env.1.2" ] && fail "a third attempt ran with --max-restarts 1"
grep -q 'failed after 1 restart' "$T/err" || { show_output; fail "stderr lacks 'failed after 1 restart(s)'"; }

# No restarts by default
D="$T/w3"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 2 --no-python "$WORKER" fail-once "$D" 0 4
expect_rc "rank 0 fails once, default --max-restarts 0" 4
[ "$(count_files "$D"/env.*.1)" = 0 ] || fail "restarted although --max-restarts defaults to 0"

assert_no_marked_left "end of test" 5
exit 0
