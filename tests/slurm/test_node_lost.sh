#!/bin/bash
# A node dies mid-run: examples/slurm/train.sbatch on three nodes with an elastic --nnodes 2:3
# (PET_NNODES, since the script passes no --nnodes; the command line would win) and
# `sbatch --no-kill` (Slurm keeps the job when one of its nodes fails). Once a checkpoint is
# recorded, node n3 crashes: every process on it (slurmd, slurmstepd, muster, the worker) gets
# SIGKILL. muster on n1 and n2 sees the lost node, restarts on the two that remain from the
# newest checkpoint and trains to the end with world size 2; Slurm marks n3 DOWN and the job
# ends.
. "$(dirname "$0")/cluster.sh"

sl_start
have_torch || fail "$TORCH_PY cannot import torch.distributed (run tools/bootstrap.sh: python3-torch)"
OUT=$T/train.out
STEPS=200
id=$(PET_NNODES=2:3 PET_RDZV_CONF=last_call_timeout=5 sl_submit_train "$OUT" --no-kill -- \
    --steps $STEPS --ckpt-every 10 --step-sleep 0.05) || sl_fail "sbatch failed: $id"
note "job $id submitted"
_recorded() { grep -q '^muster: checkpoint ckpt_[0-9]*\.pt recorded' "$OUT" 2>/dev/null; }
sl_poll 180 _recorded || { cat "$OUT" >&2; sl_fail "no checkpoint recorded within 180 s"; }
t0=$(now_ms)
sl_crash 3
note "node n3 crashed (SIGKILL to everything on it)"
st=$(sl_wait_state "$id" 240 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL) ||
    { cat "$OUT" >&2; sl_fail "job $id still $st after 240 s"; }
note "job $id ended $st $(($(now_ms) - t0)) ms after the crash; nodes: $(sl sinfo -h -N -o '%N=%t' | tr '\n' ' ')"

grep -q "^\[rank0\]: done: step $STEPS of $STEPS, world_size 2, restart_count 1" "$OUT" ||
    { cat "$OUT" >&2; sl_fail "no 'done' line from rank 0 with world size 2 after one restart"; }
grep -q "^\[rank0\]: resumed from $T/ckpt/ckpt_[1-9][0-9]*\.pt at step [1-9]" "$OUT" ||
    { cat "$OUT" >&2; sl_fail "the restart did not resume from a checkpoint"; }
[ "$(sl sinfo -h -n n3 -o '%t')" != idle ] || sl_fail "Slurm still shows n3 idle"
note "$(grep -o 'resumed from .*' "$OUT" | head -1); $(grep 'muster exited' "$OUT")"
