#!/bin/bash
# Evidence before the kill with NCCL and PyTorch's Flight Recorder, on one GPU:
#
#   tests/gpu/evidence.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR: muster built statically (see ckpt_trainers.sh). trainers/fr_stall.py: two ranks on
# the one GPU, each with an NCCL group of its own, kept in step by gloo; rank 1 stalls inside
# load_batch() before its 6th NCCL all_reduce. --hang-timeout notices (no output, no CPU); every
# rank's Flight Recorder is dumped through muster's start-up hook; the verdict must come from
# the Flight Recorder (rank 1 never entered all_reduce #6) and name load_batch. Prints the
# evidence collection time (the agent's "evidence of 2 ranks ... (N ms)") and the time from
# the hang's detection to the verdict. PASS/FAIL lines in OUT/summary.txt.
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-evidence
PY=${PYTHON_EXEC:-$(command -v python3)}
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
log "evidence: $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $("$PY" -c 'import torch; print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))')"
t0=$(date +%s%N)
PYTHON_EXEC=$PY timeout -k 5 300 "$M" run --standalone --nproc-per-node 2 --preflight off \
    --hang-timeout 5 --max-restarts 0 --log-dir "$OUT/logs" --rdzv-id gpu-ev \
    "$SRC/tests/gpu/trainers/fr_stall.py" > "$OUT/ev.out" 2> "$OUT/ev.err"
rc=$?
log "job ended with $rc after $(ms "$t0") ms"
check "$([ "$rc" != 0 ] && [ "$rc" != 124 ] && echo yes || echo no)" yes "the stalled job ends (not 0, not a timeout)"
cause=$(grep -m1 'root cause: ' "$OUT/ev.err" | sed 's/.*root cause: //')
log "root cause: $cause"
check "$(echo "$cause" | grep -c '^rank 1 (.*, local_rank 1) never entered all_reduce #6; it is in fr_stall.py:[0-9]* in load_batch')" 1 "the Flight Recorder names rank 1 and load_batch"
took=$(grep -o 'evidence of 2 ranks.*(\([0-9]*\) ms)' "$OUT/ev.err" | grep -o '([0-9]* ms)' | tr -dc 0-9)
log "evidence collection: ${took:-?} ms (bound 5000 ms, --evidence-timeout)"
b=$(find "$OUT/logs" -path '*/evidence/attempt_0' -type d | head -1)
check "$(grep -l 'last_completed_collective' "$b"/rank0.txt "$b"/rank1.txt 2>/dev/null | wc -l)" 2 "both ranks' bundles hold a Flight Recorder dump"
grep -h -A3 '== Flight Recorder ==' "$b"/rank*.txt | cut -c1-300 > "$OUT/fr_head.txt" 2>/dev/null
tail -20 "$OUT/ev.err" > "$OUT/ev.err.tail"
log "evidence: $FAILS failure(s)"
[ "$FAILS" = 0 ]
