#!/bin/bash
# GPU telemetry in shared-GPU mode on a real NVML (one H200 here): 4 tasks on GPU 0
# (--nproc-per-gpu 4 --gpu-mem-fraction 0.8, so a cap of a fifth of the GPU each), task 2
# filling 97 % of its cap and the others a third of theirs, with --gpu-telemetry 1:
#   soft: no MPS, the cap is the --gpu-mem-fraction share (MUSTER_GPU_MEM_FRACTION, which the
#         worker gives torch.cuda.set_per_process_memory_fraction): the console warns of task 2
#         "within 5 % of its memory cap" once, and of no other task;
#   mps:  --mps, the cap is MPS's pinned limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT): the same, if
#         NVML lists MPS clients' processes with their memory (logged either way: what NVML
#         shows under MPS is what this measures).
# Never "ignores LOCAL_RANK" (4 tasks on the one GPU they were given). The agent's CPU time
# over each run is logged.
#
#   tests/gpu/telemetry_shared.sh BUILD_DIR OUT_DIR
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-telemetry-shared
W=$(mktemp -d /tmp/muster-tels.XXXXXX)
cat > "$W/w.py" <<'EOP'
import os, time, torch
frac = float(os.environ["MUSTER_GPU_MEM_FRACTION"])
task = int(os.environ["MUSTER_TASK_INDEX"])
free, total = torch.cuda.mem_get_info(0)
if "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in os.environ:
    mib = int(os.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].split("=")[1].rstrip("M"))
    cap = mib << 20
else:
    torch.cuda.set_per_process_memory_fraction(frac, 0)
    cap = int(frac * total)
ctx = 600 << 20  # what NVML counts beyond the tensors: the CUDA context, cuBLAS workspace
want = int(cap * (0.97 if task == 2 else 0.33)) - ctx
buf = torch.empty(max(want, 1 << 20), dtype=torch.uint8, device="cuda:0")
x = torch.randn(4096, 4096, device="cuda:0")
print(f"task {task}: cap {cap / 2**30:.1f} GiB, holding {buf.numel() / 2**30:.1f} GiB", flush=True)
t = time.time()
while time.time() - t < float(os.environ.get("SECS", "10")):
    x = (x @ x).clamp_(-1, 1)
    torch.cuda.synchronize()
EOP
# run NAME [OPTION...]: the 4 tasks; rc and the agent's CPU ticks at the end
run() {
    local name=$1 apid last=""
    shift
    CUDA_VISIBLE_DEVICES=0 "$M" run --nproc-per-gpu 4 --gpu-mem-fraction 0.8 --gpu-telemetry 1 \
        --rdzv-id "$name" "$@" "$W/w.py" > "$OUT/$name.out" 2> "$OUT/$name.err" &
    apid=$!
    while kill -0 $apid 2>/dev/null; do
        last=$(awk '{print $14 + $15}' /proc/$apid/stat 2>/dev/null)
        sleep 0.2
    done
    wait $apid
    echo "$? $last"
}
for mode in soft mps; do
    opts=()
    [ "$mode" = mps ] && opts=(--mps)
    read -r rc cpu <<<"$(run "$mode" "${opts[@]}")"
    check "$rc" 0 "$mode: the 4 tasks ended well"
    grep -h 'task [0-9]: cap' "$OUT/$mode.out" "$OUT/$mode.err" | head -4 | while read -r l; do log "  $mode: $l"; done
    grep -h 'warning' "$OUT/$mode.err" | head -6 | while read -r l; do log "  $mode console: $l"; done
    n2=$(grep -c 'task 2 (GPU 0 of .*) uses .* memory cap' "$OUT/$mode.err")
    nother=$(grep -Ec 'task (0|1|3) \(GPU 0 of .*\) uses .* memory cap' "$OUT/$mode.err")
    nlr=$(grep -c 'ignores LOCAL_RANK' "$OUT/$mode.err")
    if [ "$mode" = mps ] && [ "$n2" = 0 ]; then
        log "NOTE mps: no cap warning: NVML did not list the MPS clients' memory (see the console lines above)"
    else
        check "$n2" 1 "$mode: task 2's cap warning, once"
    fi
    check "$nother" 0 "$mode: no cap warning of the tasks at a third of their cap"
    check "$nlr" 0 "$mode: no LOCAL_RANK warning for tasks on their GPU"
    log "$mode: agent CPU over the run (ticks of 10 ms): $cpu"
done
FAILS=$(grep -c "^FAIL" "$OUT/summary.txt")
rm -rf "$W"
log "result: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
