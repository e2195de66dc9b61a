#!/bin/bash
# The console under PyTorch 2.x, on the GPU host (torch 2.11):
#   1. --dry-run: the workers' torch is found on disk (launcher/torchver.h), so no
#      NCCL_ASYNC_ERROR_HANDLING (2.2+ warns about it in every process); the new name is set
#   2. a real NCCL DDP run (examples/pytorch/train_ddp.py --backend nccl, one worker per GPU):
#      exits 0, no "NCCL_ASYNC_ERROR_HANDLING" deprecation warning, no "[rank0]: [rank0]:" line
#
#   tests/gpu/console.sh BUILD_DIR OUT_DIR
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-console
PY=${PYTHON:-$(command -v python3)}
log "# console under torch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1) $(date -u +%FT%TZ)"
log "torch at $("$PY" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>&1), python $PY"

PYTHON_EXEC=$PY "$M" run --dry-run --standalone --nproc-per-node 1 "$SRC/examples/pytorch/train_ddp.py" \
    > "$OUT/dry.out" 2>&1
check "$(grep -c '^NCCL_ASYNC_ERROR_HANDLING=' "$OUT/dry.out")" 0 "dry-run: no NCCL_ASYNC_ERROR_HANDLING for torch 2.x"
check "$(grep -c '^TORCH_NCCL_ASYNC_ERROR_HANDLING=1' "$OUT/dry.out")" 1 "dry-run: TORCH_NCCL_ASYNC_ERROR_HANDLING=1"

n=$(nvidia-smi -L | grep -c '^GPU')
PYTHON_EXEC=$PY timeout -k 5 300 "$M" run --standalone --nproc-per-node "$n" \
    "$SRC/examples/pytorch/train_ddp.py" --backend nccl --steps 20 > "$OUT/ddp.out" 2>&1
check "$?" 0 "NCCL DDP run"
check "$(grep -c 'NCCL_ASYNC_ERROR_HANDLING' "$OUT/ddp.out")" 0 "no NCCL_ASYNC_ERROR_HANDLING warning"
check "$(grep -c '\[rank[0-9]*\]: \[rank[0-9]*\]:' "$OUT/ddp.out")" 0 "no doubled rank prefix"
grep -m3 '^\[rank0\]:\[' "$OUT/ddp.out" | sed 's/^/torch-prefixed line: /' | tee -a "$OUT/summary.txt"
log "result: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
