#!/bin/bash
# "No restart into the same failure" (issue 29), with real PyTorch (gloo, 2 workers):
# sig_train.py raises KeyError in load_batch() at the same step in every attempt.
#  1. --max-restarts 5 (--max-same-failure defaults to 2): the job stops after 2 attempts with
#     exit 6 (not retryable), and muster's lines name the signature "KeyError at
#     sig_train.py:LINE in load_batch" (LINE read from the script, not written here).
#  2. --max-same-failure 0: off, every restart is spent (3 attempts), the worker's code 1.
#  3. a newer checkpoint recorded between the attempts (--after-resume: each attempt gets one
#     step further) resets the count: all 3 attempts of --max-restarts 2 run, exit 1, not 6.
. "$(dirname "$0")/ft.sh"
need_torch
PY="$IT_DIR/sig_train.py"
line=$(grep -n 'return batches\[step\]' "$PY" | cut -d: -f1)
[ -n "$line" ] || fail "cannot find load_batch's line in $PY"
SIG="KeyError at sig_train.py:$line in load_batch"
starts() { grep -c '^\[rank0\]: start: rank 0' "$T/out"; }

# 1. stops after 2 attempts
IT_TIMEOUT=150 ft_run -- --standalone --nproc-per-node 2 --max-restarts 5 "$PY" --bug-at-step 3
expect_rc "KeyError at the same step, --max-restarts 5" 6
expect_eq "attempts before the stop" 2 "$(starts)"
stderr_has "the stop's line" "muster: not retrying: the same failure ($SIG) ended 2 attempts in a row with no newer checkpoint (--max-same-failure 2)"
stderr_has "the summary's signature" "muster:   signature  : $SIG (script)"
stderr_has "the worker's failure line" "[script: $SIG]"
stderr_has "one restart happened" "restarting workers (restart 1/5)"
grep -q 'restart 2/5' "$T/err" && { show_output; fail "a second restart happened"; }

# 2. off: every restart is spent, the worker's own exit code
IT_TIMEOUT=150 ft_run -- --standalone --nproc-per-node 2 --max-restarts 2 --max-same-failure 0 \
    "$PY" --bug-at-step 3
expect_rc "--max-same-failure 0" 1
expect_eq "attempts with --max-same-failure 0" 3 "$(starts)"
grep -q 'not retrying' "$T/err" && { show_output; fail "--max-same-failure 0 still stopped the job"; }

# 3. progress between the failures: a newer checkpoint each attempt, so each one is retried
C="$T/ckpt"
mkdir -p "$C"
IT_TIMEOUT=150 ft_run -- --standalone --nproc-per-node 2 --max-restarts 2 --checkpoint-dir "$C" \
    "$PY" --bug-at-step 3 --after-resume
expect_rc "the same KeyError with a newer checkpoint each attempt" 1
expect_eq "attempts with progress between them" 3 "$(starts)"
for k in 0 1 2; do
    grep -q "^\[rank0\]: start: rank 0 restart_count $k resume_step $k\$" "$T/out" ||
        { show_output; fail "attempt $k did not resume at step $k"; }
done
expect_eq "checkpoints recorded" "ckpt_1.pt ckpt_2.pt ckpt_3.pt" "$(recorded "$T/err" | tr '\n' ' ' | sed 's/ $//')"
grep -q 'not retrying' "$T/err" && { show_output; fail "stopped although each attempt made progress"; }
stderr_has "the signature still in the summary" "muster:   signature  : $SIG (script)"
assert_no_marked_left "end of test" 5
exit 0
