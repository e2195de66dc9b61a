#!/bin/bash
# GPU health pre-flight on a GPU host, one command from a clean tree:
#
#   tests/gpu/health.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster and muster-preflight built on the build host with
#   cmake -S . -B build-gpu -DMUSTER_STATIC_DEPS=ON -DMUSTER_PREFLIGHT_GPU=ON -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpu --target muster muster-preflight
# (the GPU host has no libuv/mbedTLS/jansson; muster-preflight loads the host's libnccl.so.2,
# and cuBLAS and NVML with dlopen). Only the two binaries need to travel. Checks:
#   1. `muster preflight` on every GPU, 3 times: passes; prints bf16 GEMM TFLOP/s, HBM copy
#      GB/s (read+write) and the NVML health line; wall time of each run (target <= 2.5 s for
#      one GPU)
#   2. the floors at the reference thresholds (700 TFLOP/s, 3800 GB/s, round2.md §8): pass
#   3. a slow GPU simulated with the test-only MUSTER_PREFLIGHT_SIMULATE_SLOW=0:0.5 (GPU 0's
#      figures halved): named with node, index, UUID and figure, the pre-flight exits 4 (one
#      GPU: by the floors; several GPUs: also by the median, without floors)
#   4. the same with --preflight-allow-slow: exit 0 with a warning
# Results: OUT_DIR/summary.txt (+ logs, reports). Exit 0 when every check passed.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-health
export MUSTER_TOKEN=gpu-health-test-token-0123456789abcdef

log "# muster GPU health pre-flight $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L | tee -a "$OUT/summary.txt"
nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.max.sm,temperature.gpu,persistence_mode --format=csv | tee -a "$OUT/summary.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
[ -x "$B/muster-preflight" ] || { log "FAIL muster-preflight was not built in $B"; exit 1; }
# cuBLAS: muster-preflight dlopens libcublas.so.13 (system path, its RUNPATH, /usr/local/cuda);
# say where this host has it
log "libcublas.so.13: $(ldconfig -p | grep -m1 'libcublas.so.13 ' | sed 's/.*=> //') $(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null)"

# 1. the whole pre-flight, three times
for i in 1 2 3; do
    pf h$i
    check "$rc" 0 "muster preflight on $ngpu GPU(s), run $i: ${tm} ms"
    [ "$tm" -le 2500 ] && log "     within 2.5 s" || log "     OVER 2.5 s"
done
grep -E "node .*GEMM|NVML|passed in|~|!" "$OUT/h3.err" | tee -a "$OUT/summary.txt"
grep -q "bf16 GEMM [0-9.]* TFLOP/s" "$OUT/h3.err"; check $? 0 "GEMM TFLOP/s printed"
grep -q "HBM copy [0-9.]* GB/s" "$OUT/h3.err"; check $? 0 "HBM GB/s printed"
grep -q "NVML: " "$OUT/h3.err"; check $? 0 "NVML health line printed"
cp "$OUT/logs/h3/preflight.json" "$OUT/health_report.json" 2>/dev/null
python3 - "$OUT/health_report.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
rep = json.load(open(sys.argv[1]))
print("report total_ms %.0f" % rep.get("total_ms", 0))
for node in rep["nccl"]:
    for r in node["ranks"]:
        h = r.get("health") or {}
        print("rank %d GPU %s: gemm %s TFLOP/s (n=%s x%s), hbm %s GB/s %s (%s bytes x%s), health ms %.0f, rank total_ms %.0f, cublas %s %s"
              % (r["rank"], r["gpu"]["uuid"], h.get("gemm_tflops"), h.get("gemm_n"), h.get("gemm_iters"), h.get("hbm_gbps"),
                 h.get("hbm_counts"), h.get("hbm_bytes"), h.get("hbm_iters"), h.get("ms", 0), r.get("total_ms", 0),
                 h.get("cublas"), h.get("gemm_note") or ""))
        print("  nvml:", json.dumps(h.get("nvml")))
PY

# 2. the reference floors pass on a healthy GPU
pf floors --preflight-min-tflops 700 --preflight-min-hbm-gbps 3800
check "$rc" 0 "floors 700 TFLOP/s and 3800 GB/s: passes (${tm} ms)"
grep -E "node .*GEMM|!" "$OUT/floors.err" | tee -a "$OUT/summary.txt"

# 3. GPU 0 simulated slow (figures halved): named, exit 4
MUSTER_PREFLIGHT_SIMULATE_SLOW=0:0.5 pf slow --preflight-min-tflops 700 --preflight-min-hbm-gbps 3800
check "$rc" 4 "simulated slow GPU 0 with the floors: pre-flight fails (${tm} ms)"
grep -q "! node .*, GPU 0 (GPU-[0-9a-f-]*): bf16 GEMM [0-9.]* TFLOP/s is below --preflight-min-tflops 700.0" "$OUT/slow.err"
check $? 0 "the slow GPU is named with node, index, UUID and figure"
grep -E "^  [!~]|pre-flight failed" "$OUT/slow.err" | head -4 | tee -a "$OUT/summary.txt"
if [ "$ngpu" -ge 2 ]; then
    MUSTER_PREFLIGHT_SIMULATE_SLOW=0:0.5 pf slowmed
    check "$rc" 4 "simulated slow GPU 0 among $ngpu: below the median"
    grep -E "^  [!~]" "$OUT/slowmed.err" | head -2 | tee -a "$OUT/summary.txt"
fi

# 4. --preflight-allow-slow: a warning, exit 0
MUSTER_PREFLIGHT_SIMULATE_SLOW=0:0.5 pf allow --preflight-min-tflops 700 --preflight-min-hbm-gbps 3800 --preflight-allow-slow
check "$rc" 0 "simulated slow GPU with --preflight-allow-slow: passes"
grep -q "~ node .*GPU 0 .*allow-slow: running anyway" "$OUT/allow.err"; check $? 0 "warned"
grep -E "^  ~" "$OUT/allow.err" | head -2 | tee -a "$OUT/summary.txt"

log "# $FAILS failed"
[ "$FAILS" = 0 ]
