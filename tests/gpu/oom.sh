#!/bin/bash
# CUDA out of memory at the same line in every attempt, on a GPU host: the failure's signature
# is "CUDA out of memory at oom_train.py:LINE in step" (class oom), so with --max-restarts 3 the
# job stops after 2 attempts (--max-same-failure 2, the default) with exit 6, not 4 attempts
# and the worker's code. One command:
#
#   tests/gpu/oom.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster (built with -DMUSTER_STATIC_DEPS=ON where the host lacks the libraries);
# the host's python3 must have a CUDA PyTorch. Results: OUT_DIR/summary.txt (+ logs). Exit 0 when
# every check passed; 77 without a GPU.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-oom

log "# muster CUDA OOM signature $(date -u +%FT%TZ) on $(hostname)"
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
    { log "FAIL python3 has no CUDA PyTorch"; exit 1; }
PY=$OUT/oom_train.py
cat > "$PY" <<'EOS'
import os
import torch


def step(n):
    free, total = torch.cuda.mem_get_info()
    return torch.empty(int(total) * 4, dtype=torch.uint8, device="cuda")  # never fits


print("start restart_count", os.environ.get("TORCHELASTIC_RESTART_COUNT"), flush=True)
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
for n in range(3):
    step(n)
EOS
line=$(grep -n 'never fits' "$PY" | cut -d: -f1)
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout -k 5 300 "$M" run --standalone \
    --nproc-per-node 1 --max-restarts 3 "$PY" > "$OUT/oom.out" 2> "$OUT/oom.err"
rc=$?
check "$rc" 6 "CUDA OOM at the same line, --max-restarts 3: exit 6 (not retryable)"
check "$(grep -c '^\[rank0\]: start restart_count' "$OUT/oom.out")" 2 "attempts before the stop"
grep -qF "muster: not retrying: the same failure (CUDA out of memory at oom_train.py:$line in step) ended 2 attempts in a row" "$OUT/oom.err"
check $? 0 "the not-retrying line names the OOM signature"
grep -qF "signature  : CUDA out of memory at oom_train.py:$line in step (oom)" "$OUT/oom.err"
check $? 0 "the summary's signature is class oom"
log "failures: $FAILS"
[ "$FAILS" = 0 ]
