#!/bin/bash
# `sbatch examples/slurm/train.sbatch` on three Slurm nodes: one `muster run` per node through
# srun, with no rendezvous flags (muster takes --nnodes, --rdzv-id and --rdzv-endpoint from
# SLURM_*), trains examples/pytorch/train_ckpt.py to the end: the job COMPLETES, rank 0 reports
# world size 3, and checkpoints were recorded.
. "$(dirname "$0")/cluster.sh"

sl_start
have_torch || fail "$TORCH_PY cannot import torch.distributed (run tools/bootstrap.sh: python3-torch)"
OUT=$T/train.out
id=$(sl_submit_train "$OUT" -- --steps 30 --ckpt-every 10) || sl_fail "sbatch failed: $id"
note "job $id submitted"
st=$(sl_wait_state "$id" 240 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL) ||
    { cat "$OUT" >&2; sl_fail "job $id still $st after 240 s"; }
[ "$st" = COMPLETED ] || { cat "$OUT" >&2; sl_fail "job $id ended $st"; }
grep -q "^\[rank0\]: done: step 30 of 30, world_size 3, restart_count 0" "$OUT" ||
    { cat "$OUT" >&2; sl_fail "no 'done' line from rank 0 with world size 3"; }
grep -q "muster exited with 0" "$OUT" || { cat "$OUT" >&2; sl_fail "muster did not exit 0"; }
# the rendezvous id is the job id (muster's progress lines name it)
grep -q "^muster: rendezvous $id: " "$OUT" || { cat "$OUT" >&2; sl_fail "no rendezvous named $id"; }
[ -f "$T/ckpt/ckpt_30.pt" ] || { ls -la "$T/ckpt" >&2; sl_fail "no ckpt_30.pt in the checkpoint dir"; }
note "job $id: $(grep -c '^\[rank' "$OUT") worker lines, state $st"
