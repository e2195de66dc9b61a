#!/bin/bash
# "Not retryable" through the real scheduler: examples/slurm/train.sbatch (--requeue,
# --max-restarts 3) runs tests/integration/sig_train.py on three nodes, which raises KeyError in
# load_batch() at step 3 on every rank in every attempt. The server stops the job after 2
# attempts (--max-same-failure 2, the default) with restarts left; every muster exits 6, the
# script says it does not requeue, and the job ends FAILED without a second run
# (SLURM_RESTART_COUNT stays 0).
. "$(dirname "$0")/cluster.sh"

sl_start
have_torch || fail "$TORCH_PY cannot import torch.distributed (run tools/bootstrap.sh: python3-torch)"
OUT=$T/train.out
id=$(sl_submit_train "$OUT" --export=ALL,TRAIN=tests/integration/sig_train.py -- \
    --steps 10 --bug-at-step 3) || sl_fail "sbatch failed: $id"
note "job $id submitted"
st=$(sl_wait_state "$id" 240 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL) ||
    { cat "$OUT" >&2; sl_fail "job $id still $st after 240 s"; }
[ "$st" = FAILED ] || { cat "$OUT" >&2; sl_fail "job $id ended $st, not FAILED"; }
grep -q "muster exited with 6" "$OUT" || { cat "$OUT" >&2; sl_fail "muster did not exit 6"; }
grep -q "not requeueing job $id: not retryable" "$OUT" || { cat "$OUT" >&2; sl_fail "the script did not say it does not requeue"; }
grep -q "requeueing job $id: the next run" "$OUT" && { cat "$OUT" >&2; sl_fail "the script requeued a not-retryable job"; }
grep -q "job $id run 1 " "$OUT" && { cat "$OUT" >&2; sl_fail "the job ran a second time"; }
grep -q "muster: not retrying: the same failure (KeyError at sig_train.py:[0-9]* in load_batch) ended 2 attempts in a row" "$OUT" ||
    { cat "$OUT" >&2; sl_fail "no 'not retrying' line naming the KeyError"; }
n=$(grep -c '^\[rank0\]: start: rank 0 ' "$OUT")
[ "$n" = 2 ] || { cat "$OUT" >&2; sl_fail "rank 0 started $n times, not 2"; }
grep -q 'restart 2/3' "$OUT" && { cat "$OUT" >&2; sl_fail "a second restart happened"; }
note "job $id: stopped after 2 attempts, exit 6, state $st, not requeued"
