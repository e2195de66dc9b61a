#!/bin/bash
# The health check before a restart round (docs/PREFLIGHT.md "Health check before a restart
# round") on a GPU host, one command from a clean tree:
#
#   tests/gpu/health_restart.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster and muster-preflight (built as for tests/gpu/health.sh); the host's
# python3 has torch with CUDA. Exits 77 without a GPU. Checks:
#   1. `muster-preflight health --device I` alone on every GPU, 3 times: exit 0, one "ok" line
#      (memory, exact GEMM with TFLOP/s, NVML); wall time of each (target < 1 s)
#   2. a 1-GPU job (--standalone, --preflight off, --max-restarts 1) whose worker allocates
#      8 GiB on GPU 0 and SIGKILLs itself in attempt 0: the agent runs the check (it waits for
#      the killed worker's memory), it passes in < 1 s, attempt 1 runs and the job exits 0;
#      printed: the check's time ("passed in") and the kill -> attempt 1 time
#   3. the same with the test-only MUSTER_PREFLIGHT_SIMULATE_HEALTH_FAIL=0: the check fails
#      naming GPU 0 (UUID, PCI bus id), the agent leaves and exits 4
# Results: OUT_DIR/summary.txt (+ logs). Exit 0 when every check passed.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-health-restart

log "# muster health check before a restart round $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L | tee -a "$OUT/summary.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
[ -x "$B/muster-preflight" ] || { log "FAIL muster-preflight was not built in $B"; exit 1; }
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null \
    || { log "FAIL python3 has no torch with CUDA"; exit 1; }

# 1. the check alone, per GPU
for i in 1 2 3; do
    for g in $(seq 0 $((ngpu - 1))); do
        t=$(date +%s%N)
        timeout -k 5 60 "$B/muster-preflight" health --device "$g" --pids 0 >"$OUT/h$i.$g.out" 2>"$OUT/h$i.$g.err"
        rc=$?
        tm=$(ms "$t")
        check "$rc" 0 "muster-preflight health on GPU $g, run $i: ${tm} ms"
        [ "$tm" -lt 1000 ] && log "     under 1 s" || log "     OVER 1 s"
    done
done
cat "$OUT/h3.0.out" | tee -a "$OUT/summary.txt"
grep -q "GPU 0 (GPU-[0-9a-f-]*): ok in .*bf16 GEMM 4096^3 x10 exact, [0-9.]* TFLOP/s; NVML: " "$OUT/h3.0.out"
check $? 0 "the ok line has the exact GEMM and NVML"

# 2. a killed worker that held 8 GiB: checked, then restarted
W=$OUT/worker.py
cat >"$W" <<'PY'
import os, signal, sys, time
import torch
out = sys.argv[1]
n = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda:0")
x.fill_(1)
torch.cuda.synchronize()
if n == 0:
    with open(out + ".kill", "w") as f:
        f.write("%d\n" % time.time_ns())
    os.kill(os.getpid(), signal.SIGKILL)
with open(out + ".start1", "w") as f:
    f.write("%d\n" % time.time_ns())
PY
PY=$(command -v python3)
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
job() {
    local name=$1
    shift
    rm -f "$OUT/$name.kill" "$OUT/$name.start1"
    t=$(date +%s%N)
    timeout -k 5 120 env CUDA_VISIBLE_DEVICES=0 PYTHON_EXEC="$PY" "$@" "$M" run --standalone \
        --nproc-per-node 1 --preflight off --max-restarts 1 --log-dir "$OUT/logs/$name" "$W" "$OUT/$name" \
        >"$OUT/$name.out" 2>"$OUT/$name.err"
    rc=$?
    tm=$(ms "$t")
}
job restart
check "$rc" 0 "1-GPU job with a killed worker: restarts and exits 0 (${tm} ms)"
grep -E "health check" "$OUT/restart.err" | tee -a "$OUT/summary.txt"
grep -E "muster-preflight: health: " "$OUT/restart.out" "$OUT/restart.err" | tee -a "$OUT/summary.txt"
took=$(sed -n 's/.*health check passed in \([0-9.]*\) s.*/\1/p' "$OUT/restart.err" | head -1)
[ -n "$took" ]; check $? 0 "the agent ran the check and it passed (${took:-?} s)"
[ -n "$took" ] && awk "BEGIN{exit !($took < 1.0)}"; check $? 0 "the check took < 1 s (${took:-?} s)"
if [ -s "$OUT/restart.kill" ] && [ -s "$OUT/restart.start1" ]; then
    log "kill -> attempt 1's worker holding its 8 GiB again: $((($(cat "$OUT/restart.start1") - $(cat "$OUT/restart.kill")) / 1000000)) ms"
fi

# 3. a GPU that fails its check: the node leaves, exit 4
job fail MUSTER_PREFLIGHT_SIMULATE_HEALTH_FAIL=0
check "$rc" 4 "a GPU failing its check (simulated): the agent exits 4 (${tm} ms)"
grep -q "health check failed on .*: GPU 0 (GPU-[0-9a-f-]*, [0-9a-f:.]*): simulated failure" "$OUT/fail.err"
check $? 0 "the failure names GPU 0 with its UUID and PCI bus id"
grep -E "health check|this node leaves" "$OUT/fail.err" | tee -a "$OUT/summary.txt"
[ -e "$OUT/fail.start1" ]; check $? 1 "no attempt 1 after the failed check"

log "# $FAILS failed"
[ "$FAILS" = 0 ]
