#!/bin/bash
# GPU telemetry on a real NVML (one H200 here): a job of 2 ranks that both run on GPU 0 (as a
# script that ignores LOCAL_RANK does; on a one-GPU host that is no mistake, so no warning is
# expected) under a real `muster server --http`: /status shows GPU 0 with its utilisation,
# memory and both ranks' processes, /metrics the muster_gpu_* series; the agent's own CPU time
# and peak RSS with --gpu-telemetry 1 against off (the same job), from /proc.
#
#   tests/gpu/telemetry.sh BUILD_DIR OUT_DIR
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-telemetry
W=$(mktemp -d /tmp/muster-tel.XXXXXX)
echo "gpu-telemetry-secret" > "$W/tok"; chmod 600 "$W/tok"
cat > "$W/w.py" <<'EOP'
import os, time, torch
x = torch.randn(16384, 16384, device="cuda:0")          # 1 GiB; both ranks on GPU 0
y = torch.empty(3 << 28, dtype=torch.uint8, device="cuda:0")  # + 768 MiB
t = time.time()
while time.time() - t < float(os.environ.get("SECS", "14")):
    x = (x @ x).clamp_(-1, 1)
    torch.cuda.synchronize()
EOP
"$M" server --listen 127.0.0.1:29581 --http 127.0.0.1:29582 --http-public-status --token-file "$W/tok" 2> "$W/server.err" &
spid=$!
sleep 0.5
# job TEL MODE: runs the job with --gpu-telemetry MODE; the agent's CPU ticks and VmHWM at its end
job() {
    local id=$1 mode=$2 apid last=""
    "$M" run --nnodes 1 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:29581 --rdzv-id "$id" \
        --token-file "$W/tok" --preflight off --gpu-telemetry "$mode" "$W/w.py" > "$W/$id.out" 2> "$W/$id.err" &
    apid=$!
    if [ "$mode" != off ]; then
        sleep 9
        curl -s -m 5 http://127.0.0.1:29582/status > "$OUT/status.json"
        curl -s -m 5 http://127.0.0.1:29582/metrics > "$OUT/metrics.txt"
    fi
    while kill -0 $apid 2>/dev/null; do
        last="$(awk '{print $14 + $15}' /proc/$apid/stat 2>/dev/null) $(awk '/VmHWM/ {print $2}' /proc/$apid/status 2>/dev/null) $(awk '/^Anonymous:/ {a = $2} /^Private_Dirty:/ {d = $2} /^Rss:/ {r = $2} END {print a, d, r}' /proc/$apid/smaps_rollup 2>/dev/null)"
        sleep 0.2
    done
    wait $apid
    echo "$? $last"
}
read -r rc_on cpu_on hwm_on anon_on dirty_on rss_on <<<"$(job tel1 1)"
read -r rc_off cpu_off hwm_off anon_off dirty_off rss_off <<<"$(job tel0 off)"
check "$rc_on" 0 "the job with --gpu-telemetry 1 ended well"
check "$rc_off" 0 "the job with --gpu-telemetry off ended well"
python3 - "$OUT/status.json" <<'EOP' | while read -r l; do log "$l"; done
import json, sys
d = json.load(open(sys.argv[1]))
job = [j for j in d["jobs"] if j["id"] == "tel1"][0]
tel = job["nodes"][0].get("telemetry")
if not tel or not tel.get("gpus"):
    print("FAIL no telemetry in /status:", json.dumps(job["nodes"][0])[:400]); sys.exit()
g = tel["gpus"][0]
ranks = sorted(p["rank"] for p in g["procs"] if p["rank"] is not None)
print("gpu 0:", {k: g[k] for k in ("util", "mem_used", "mem_total", "sm_clock", "mem_clock", "temp", "power_w", "throttle")}, "procs", g["procs"])
print(("PASS" if ranks == [0, 1] else "FAIL") + f" both ranks' processes on GPU 0 mapped to ranks {ranks}")
print(("PASS" if g["util"] > 0 else "FAIL") + f" utilisation {g['util']} > 0 while the ranks multiply")
print(("PASS" if g["mem_used"] > 3 << 30 else "FAIL") + f" memory used {g['mem_used']} > 3 GiB")
print("warnings:", job.get("warnings"))
EOP
grep -q '^muster_gpu_utilization_ratio{' "$OUT/metrics.txt" && log "PASS /metrics has muster_gpu_utilization_ratio" || log "FAIL /metrics lacks muster_gpu_utilization_ratio"
grep '^muster_gpu' "$OUT/metrics.txt" | head -12 | while read -r l; do log "  $l"; done
log "agent CPU over the job (ticks of 10 ms): telemetry 1 s: $cpu_on, off: $cpu_off; peak RSS kB: $hwm_on vs $hwm_off"
# what the RSS is made of at the job's end (smaps_rollup): anonymous memory and private dirty
# pages are the agent's own; the rest is file-backed pages of mapped libraries (NVML's text),
# clean and shared with every other process that maps them
log "agent memory at the end, kB (telemetry 1 s vs off): RSS $rss_on vs $rss_off, anonymous $anon_on vs $anon_off, private dirty $dirty_on vs $dirty_off"
grep -q '^muster_rank_gpu_memory_bytes{job="tel1",rank="1"' "$OUT/metrics.txt" && log "PASS /metrics has rank 1's muster_rank_gpu_memory_bytes" || log "FAIL /metrics lacks rank 1's muster_rank_gpu_memory_bytes"
grep -h 'warning\|GPU' "$W/tel1.err" | head -5 | while read -r l; do log "  agent: $l"; done
kill $spid; wait $spid 2>/dev/null
FAILS=$(grep -c "^FAIL" "$OUT/summary.txt")
rm -rf "$W"
log "result: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
