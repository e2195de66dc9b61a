#!/bin/bash
# GPU smoke run for `muster run` (on a GPU host): GPU counting without CUDA in the agent,
# a real NCCL DDP job under muster and under torchrun side by side, a restart with NCCL, the
# libmuster example, and bench/bench.sh with the host's torchrun.
#
#   tests/gpu/smoke.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds a muster built with -DMUSTER_STATIC_DEPS=ON (the GPU host has no libuv,
# mbedTLS, jansson). Results: OUT_DIR/summary.txt (+ logs). Exit 0 when every check passed.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu

log "# muster GPU smoke $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L | tee -a "$OUT/summary.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
python3 -c 'import torch; print("torch", torch.__version__, "cuda devices", torch.cuda.device_count())' | tee -a "$OUT/summary.txt"

# 1. --nproc-per-node gpu counts from /proc/driver/nvidia/gpus, CUDA_VISIBLE_DEVICES respected
n=$("$M" run --dry-run --standalone --nproc-per-node gpu --no-python /bin/true | sed -n 's/^nproc_per_node=//p')
check "$n" "$ngpu" "nproc-per-node gpu = nvidia-smi count"
n=$(CUDA_VISIBLE_DEVICES=0 "$M" run --dry-run --standalone --nproc-per-node gpu --no-python /bin/true | sed -n 's/^nproc_per_node=//p')
check "$n" 1 "nproc-per-node gpu with CUDA_VISIBLE_DEVICES=0"
n=$(CUDA_VISIBLE_DEVICES= "$M" run --dry-run --standalone --nproc-per-node auto --no-python /bin/true | sed -n 's/^nproc_per_node=//p')
check "$n" "$(nproc)" "nproc-per-node auto with no visible GPU = CPU count"

# 2. NCCL DDP, one GPU per worker, muster then torchrun (same script, same steps)
t=$(date +%s%N)
"$M" run --standalone --nproc-per-node gpu "$SRC/examples/pytorch/train_ddp.py" --backend nccl --steps 200 >"$OUT/ddp_muster.log" 2>&1
rc=$?; tm=$(ms "$t")
check "$rc" 0 "NCCL DDP under muster ($ngpu GPUs, ${tm} ms)"
grep -q "params identical across ranks: True" "$OUT/ddp_muster.log"; check $? 0 "DDP parameters identical across ranks (muster)"
t=$(date +%s%N)
torchrun --standalone --nproc_per_node "$ngpu" "$SRC/examples/pytorch/train_ddp.py" --backend nccl --steps 200 >"$OUT/ddp_torchrun.log" 2>&1
rc=$?; tt=$(ms "$t")
check "$rc" 0 "NCCL DDP under torchrun ($ngpu GPUs, ${tt} ms)"
log "DDP wall time: muster ${tm} ms, torchrun ${tt} ms"

# 3. a worker fails once: the whole group restarts, NCCL re-initialises, the job finishes
"$M" run --standalone --nproc-per-node gpu --max-restarts 1 "$SRC/examples/pytorch/train_ddp.py" --backend nccl --steps 200 --fail-once-rank $((ngpu - 1)) >"$OUT/ddp_restart.log" 2>&1
check $? 0 "NCCL DDP with one injected failure and --max-restarts 1"
grep -q "restart_count 1, params identical across ranks: True" "$OUT/ddp_restart.log"; check $? 0 "restarted job finished with restart_count 1"

# 4. libmuster key-value exchange (the NCCL unique-id pattern)
"$M" run --standalone --nproc-per-node 4 --no-python "$B/examples/c/kv_example" >"$OUT/kv.log" 2>&1
check $? 0 "libmuster kv_example, 4 workers"

# 5. launcher figures beside this host's torchrun (issue-2 benchmark, on a bigger host)
if command -v cc >/dev/null 2>&1; then
    MUSTER_BIN=$M TORCHRUN=$(command -v torchrun) TORCHRUN_FIX="" RUNS=20 RESTART_RUNS=10 \
        bash "$SRC/bench/bench.sh" "$OUT/bench.txt" >"$OUT/bench.log" 2>&1
    log "bench/bench.sh rc=$?"; cat "$OUT/bench.txt" >>"$OUT/summary.txt" 2>/dev/null
else
    log "SKIP bench/bench.sh: no C compiler on this host"
fi
log "failures: $FAILS"
[ "$FAILS" = 0 ]
