#!/bin/bash
# The agent's TCPStore with PyTorch 2.x's client (2.11 on the H200 host: the 2.2+
# dialect, VALIDATE first, no attempt prefix), one command from a clean tree:
#
#   tests/gpu/store.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster built statically on the build host (see tests/gpu/launch.sh).
#   1. RUNS (200) runs of pytorch's test_script_init_method.py shape under muster
#      (tests/integration/store_worker.py init: env://, no destroy_process_group), NPROC (2)
#      workers: every run exits 0, no "terminate called", TORCHELASTIC_USE_AGENT_STORE=True
#   2. the same script's restart mode on a fixed --master-port: attempt 1 sees none of
#      attempt 0's keys (2.x uses no attempt prefix: pytorch#135712)
#   3. TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 still works (False, worker rank 0 hosts)
#   4. bench/store_bench.sh: start-up and restart to first step, muster beside the host's
#      torchrun 2.11 (no --redirects/--tee workaround needed there)
# NCCL_NVLS_ENABLE=0 is in every worker's environment (lib.sh). Results: OUT_DIR/summary.txt.
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-store
PY=${PYTHON:-$(command -v python3)}
W=$SRC/tests/integration/store_worker.py
RUNS=${RUNS:-200}
NPROC=${NPROC:-2}
log "# agent store $(date -u +%FT%TZ) on $(hostname), torch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1)"

failed=0 aborts=0 t0=$(date +%s%N)
for i in $(seq "$RUNS"); do
    PYTHON_EXEC=$PY timeout -k 5 120 "$M" run --standalone --nproc-per-node "$NPROC" "$W" init \
        > "$OUT/init.out" 2>&1 || { failed=$((failed + 1)); cp "$OUT/init.out" "$OUT/init.fail.$i"; }
    grep -q "terminate called" "$OUT/init.out" && aborts=$((aborts + 1))
done
log "init script: $RUNS runs in $(ms "$t0") ms"
check "$failed" 0 "init script runs that failed"
check "$aborts" 0 "init script runs with 'terminate called'"
check "$(grep -c 'USE_AGENT_STORE=True' "$OUT/init.out")" "$NPROC" "TORCHELASTIC_USE_AGENT_STORE=True"

PYTHON_EXEC=$PY timeout -k 5 180 "$M" run --standalone --nproc-per-node "$NPROC" --max-restarts 1 \
    --master-port $((20000 + RANDOM % 20000)) "$W" restart > "$OUT/restart.out" 2>&1
check "$?" 0 "restart on a fixed MASTER_PORT"
check "$(grep -c "attempt 1 sees attempt 0's keys: \[False\(, False\)*\]" "$OUT/restart.out")" 1 \
    "attempt 1 sees none of attempt 0's keys"

TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 PYTHON_EXEC=$PY timeout -k 5 120 "$M" run --standalone \
    --nproc-per-node "$NPROC" "$W" init > "$OUT/disabled.out" 2>&1
check "$?" 0 "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
check "$(grep -c 'USE_AGENT_STORE=False' "$OUT/disabled.out")" "$NPROC" "TORCHELASTIC_USE_AGENT_STORE=False"

MUSTER_BIN=$M PYTHON=$PY TORCHRUN=${TORCHRUN:-$(command -v torchrun)} TORCHRUN_FIX="" \
    RUNS=${BENCH_RUNS:-20} NPROC=$NPROC "$SRC/bench/store_bench.sh" "$OUT/bench.txt" \
    > "$OUT/bench.out" 2>&1
check "$?" 0 "bench/store_bench.sh ran"
cat "$OUT/bench.txt" >> "$OUT/summary.txt"
log "result: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
