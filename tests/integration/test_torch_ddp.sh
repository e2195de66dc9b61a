#!/bin/bash
# The real client: Debian's PyTorch (gloo, env://) DDP example under muster with 2 and 4
# workers, and a restart after an injected failure.
. "$(dirname "$0")/lib.sh"

have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
EX="$MUSTER_SRC/examples/pytorch/train_ddp.py"
[ -f "$EX" ] || fail "missing $EX"

for n in 2 4; do
    IT_TIMEOUT=240 mrun PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node $n "$EX" --steps 30
    expect_rc "DDP with $n workers" 0
    grep -q "^\[rank0\]: final loss .* world_size $n, restart_count 0, params identical across ranks: True" "$T/out" \
        || { show_output; fail "DDP with $n workers: no successful final line from rank 0"; }
    for r in $(seq 0 $((n - 1))); do
        grep -q "^\[rank$r\]: rank $r/$n " "$T/out" || { show_output; fail "DDP $n: rank $r did not report in"; }
    done
done

IT_TIMEOUT=240 mrun PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node 2 --max-restarts 1 \
    "$EX" --steps 30 --fail-once-rank 1
expect_rc "DDP with an injected failure of rank 1 and --max-restarts 1" 0
grep -q '^\[rank1\]: rank 1: injected failure' "$T/out" || { show_output; fail "the injected failure did not happen"; }
grep -q 'restarting workers (restart 1/1)' "$T/err" || { show_output; fail "stderr lacks 'restarting workers (restart 1/1)'"; }
grep -q "^\[rank0\]: final loss .* restart_count 1, params identical across ranks: True" "$T/out" \
    || { show_output; fail "no successful final line with restart_count 1"; }

# without restarts the same failure is the job's exit code (3)
IT_TIMEOUT=240 mrun PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node 2 \
    "$EX" --steps 30 --fail-once-rank 1
expect_rc "DDP with an injected failure and no restarts" 3
grep -q 'root cause' "$T/err" || fail "no root-cause summary"

assert_no_marked_left "end of test" 10
exit 0
