#!/bin/bash
# GPU telemetry end to end with the fake NVML (tests/peers/fake_nvml.c, loaded by the agent's
# own dlopen through MUSTER_NVML_LIBRARY): a real `muster server` and `muster run` of 2 workers.
# bad: both ranks' processes on GPU 0 (rank 1's is a child of its worker: descendants count),
#   GPU 1 idle and throttled (power cap, HW thermal): /status has the node's telemetry with the
#   processes mapped to ranks 0 and 1, /metrics the series per job, node and GPU; the job's
#   warnings and the agent's console say "ranks 0-1 all run on GPU 0 ... ignores LOCAL_RANK"
#   and "GPU 1 ... is throttled", each once, and (the grace cut to 1.5 s by
#   MUSTER_TELEMETRY_GRACE_MS) "GPU 1 ... has no process of rank 1".
# healthy: rank 0 on GPU 0, rank 1 on GPU 1, no throttle, the same grace: telemetry, and no
#   warning at all.
# off: --gpu-telemetry off sends nothing (telemetry null); a bad value is a usage error.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_cmd curl "for /status and /metrics"
[ -n "${FAKE_NVML:-}" ] && [ -f "$FAKE_NVML" ] || skip "FAKE_NVML (the fake libnvidia-ml.so) is not built"
need_cmd jq "to read /status"

start_server
[ -n "$SHTTP" ] || fail "no HTTP port: $(cat "$SERR")"
mkdir -p "$T/w"
cat > "$T/w.sh" <<'SH'
#!/bin/bash
# a worker: its pid (or, with CHILD=1 for rank 1, a child's) where the fake NVML reads it
if [ "${CHILD:-0}" = 1 ] && [ "$RANK" = 1 ]; then
    sleep 60 &
    echo $! > "$WDIR/pid.$JOB.$RANK"
else
    echo $$ > "$WDIR/pid.$JOB.$RANK"
fi
for _ in $(seq 300); do [ -e "$WDIR/stop.$JOB" ] && exit 0; sleep 0.1; done
exit 0
SH
chmod +x "$T/w.sh"
GiB=1073741824

# scenario JOB GPU_OF_RANK0 GPU_OF_RANK1 THROTTLE_OF_GPU1
scenario() {
    cat > "$T/$1.scn" <<SCN
# util used total sm mem temp power_mw throttle
gpu 97 $((30 * GiB)) $((80 * GiB)) 1980 2619 61 412000 0
gpu 0 $((1 * GiB)) $((80 * GiB)) 1100 2619 91 180000 $4
proc $2 $T/w/pid.$1.0 $((12 * GiB))
proc $3 $T/w/pid.$1.1 $((11 * GiB))
SCN
}

# run_job JOB [ENV=VALUE...]: starts agent JOB of 2 workers with the fake NVML
run_job() {
    local job=$1
    shift
    agent "$job" MUSTER_NVML_LIBRARY="$FAKE_NVML" FAKE_NVML_SCENARIO="$T/$job.scn" \
        WDIR="$T/w" JOB="$job" MUSTER_TELEMETRY_GRACE_MS=1500 "$@" -- --nnodes 1 --nproc-per-node 2 --no-python \
        --gpu-telemetry 0.5 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id "$job" "$T/w.sh"
}

# job_status JOB: /status's object of job JOB into $T/job.json
job_status() {
    http_get "$SHTTP" /status
    jq -c --arg j "$1" '.jobs[] | select(.id == $j)' "$T/http.body" > "$T/job.json" 2>/dev/null
}

# procs_mapped JOB: the job's node shows both ranks' processes in its telemetry
procs_mapped() {
    job_status "$1"
    [ "$(jq -c '[.nodes[0].telemetry.gpus[].procs[].rank] | sort' "$T/job.json" 2>/dev/null)" = "[0,1]" ]
}

finish_job() {
    touch "$T/w/stop.$1"
    agent_wait "$1" 60
    expect_eq "job $1's exit" 0 "$RC"
}

# --- bad: both ranks on GPU 0, GPU 1 throttled ---
scenario bad 0 0 0x44
run_job bad CHILD=1
wait_for 30 procs_mapped bad || { show_all; cat "$T/job.json" >&2; fail "/status never showed both ranks' processes"; }
wait_for 10 sh -c "grep -q 'ignores LOCAL_RANK' '$T/bad.err' && grep -q 'is throttled' '$T/bad.err' && grep -q 'has no process of rank 1 ' '$T/bad.err'" \
    || { show_agent bad; fail "the agent did not warn"; }
sleep 1.2 # the warnings travel with the next sample
job_status bad
jq -e '.nodes[0].telemetry | .t_ms > 0 and (.gpus | length) == 2' "$T/job.json" > /dev/null \
    || { cat "$T/job.json" >&2; fail "no telemetry of 2 GPUs in /status"; }
g0=$(jq -c '.nodes[0].telemetry.gpus[0] | [.gpu, .util, .mem_used, .mem_total, .sm_clock, .mem_clock, .temp, .power_w, .throttle]' "$T/job.json")
expect_eq "GPU 0's facts" "[0,97,$((30 * GiB)),$((80 * GiB)),1980,2619,61,412,0]" "$g0"
expect_eq "GPU 1's throttle bits" 68 "$(jq '.nodes[0].telemetry.gpus[1].throttle' "$T/job.json")"
expect_eq "GPU 0's processes by rank" "[[0,$((12 * GiB))],[1,$((11 * GiB))]]" \
    "$(jq -c '[.nodes[0].telemetry.gpus[0].procs[] | [.rank, .mem]] | sort' "$T/job.json")"
expect_eq "GPU 1's processes" 0 "$(jq '.nodes[0].telemetry.gpus[1].procs | length' "$T/job.json")"
jq -r '.warnings[]' "$T/job.json" > "$T/warn.txt"
grep -q '^ranks 0-1 all run on GPU 0 of .*: the script ignores LOCAL_RANK$' "$T/warn.txt" \
    || { cat "$T/job.json" >&2; fail "/status lacks the LOCAL_RANK warning"; }
grep -q '^GPU 1 of .* is throttled: power cap, thermal (hardware)' "$T/warn.txt" \
    || { cat "$T/warn.txt" >&2; fail "/status lacks the throttle warning"; }
grep -q '^GPU 1 of .* has no process of rank 1 (local rank 1) after [0-9]* s$' "$T/warn.txt" \
    || { cat "$T/warn.txt" >&2; fail "/status lacks the no-process warning"; }
expect_eq "warnings in /status" 3 "$(wc -l < "$T/warn.txt")"
http_get "$SHTTP" /metrics
for series in "muster_gpu_utilization_ratio{job=\"bad\",node=\"[^\"]*\",gpu=\"0\"} 0.97" \
    "muster_gpu_memory_used_bytes{job=\"bad\",node=\"[^\"]*\",gpu=\"0\"} $((30 * GiB))" \
    "muster_gpu_throttle_reasons{job=\"bad\",node=\"[^\"]*\",gpu=\"1\"} 68" \
    "muster_gpu_processes{job=\"bad\",node=\"[^\"]*\",gpu=\"0\"} 2" \
    "muster_gpu_power_watts{job=\"bad\",node=\"[^\"]*\",gpu=\"1\"} 180" \
    "muster_rank_gpu_memory_bytes{job=\"bad\",rank=\"0\",node=\"[^\"]*\",gpu=\"0\"} $((12 * GiB))" \
    "muster_rank_gpu_memory_bytes{job=\"bad\",rank=\"1\",node=\"[^\"]*\",gpu=\"0\"} $((11 * GiB))"; do
    grep -q "^$series\$" "$T/http.body" || { grep '^muster_gpu' "$T/http.body" >&2; fail "/metrics lacks $series"; }
done
# muster status: a row per GPU (its ranks), and the warnings
OUTF=$T/st.out ERRF=$T/st.err IT_TIMEOUT=10 mrun -- status --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id bad
expect_eq "muster status's exit" 0 "$RC"
grep -Eq '^  [^ ]+ +0 +97 % +30.0/ 80.0 GiB +1980 +61 C +412 W +0,1$' "$T/st.out" ||
    { cat "$T/st.out" >&2; fail "muster status lacks GPU 0's row"; }
grep -Eq '^  [^ ]+ +1 +0 % +1.0/ 80.0 GiB +1100 +91 C +180 W +-$' "$T/st.out" ||
    { cat "$T/st.out" >&2; fail "muster status lacks GPU 1's row"; }
expect_eq "warnings in muster status" 3 "$(grep -c '^  warning: ' "$T/st.out")"
finish_job bad
expect_eq "LOCAL_RANK warnings on the console" 1 "$(grep -c 'ignores LOCAL_RANK' "$T/bad.err")"
expect_eq "throttle warnings on the console" 1 "$(grep -c 'is throttled' "$T/bad.err")"
expect_eq "no-process warnings on the console" 1 "$(grep -c 'has no process' "$T/bad.err")"

# --- healthy: one GPU per rank, nothing throttled ---
scenario good 0 1 0
run_job good
wait_for 30 procs_mapped good || { show_all; cat "$T/job.json" >&2; fail "/status never showed the healthy job's processes"; }
sleep 2 # a few more samples, past the grace
job_status good
expect_eq "the healthy job's warnings" "[]" "$(jq -c '.warnings' "$T/job.json")"
expect_eq "GPU 1's process" 1 "$(jq -c '[.nodes[0].telemetry.gpus[1].procs[].rank]|.[0]' "$T/job.json")"
finish_job good
grep -qE 'ignores LOCAL_RANK|is throttled|has no process' "$T/good.err" && { cat "$T/good.err" >&2; fail "the healthy job was warned of"; }

# --- xid: Xid critical error events (nvmlEventSetWait_v2) appear while the job runs ---
scenario xid 0 1 0
run_job xid
wait_for 30 procs_mapped xid || { show_all; fail "job xid: /status never showed its processes"; }
printf 'xid 1 79\nxid 1 79\nxid 0 48\n' >> "$T/xid.scn"
xid_said() { grep -q 'GPU 1 of .* reported Xid 79 (GPU has fallen off the bus)$' "$T/xid.err" && grep -q 'GPU 0 of .* reported Xid 48 (double-bit ECC error: the GPU needs a reset)$' "$T/xid.err"; }
wait_for 10 xid_said || { show_agent xid; fail "the agent did not warn of the Xids"; }
sleep 1.2 # the warnings travel with the next sample
job_status xid
expect_eq "the GPUs' last Xids in /status" "[48,79]" "$(jq -c '[.nodes[0].telemetry.gpus[].xid]' "$T/job.json")"
expect_eq "Xid warnings in /status" 2 "$(jq '[.warnings[] | select(test("reported Xid"))] | length' "$T/job.json")"
http_get "$SHTTP" /metrics
grep -q '^muster_gpu_last_xid{job="xid",node="[^"]*",gpu="1"} 79$' "$T/http.body" || { grep xid "$T/http.body" >&2; fail "/metrics lacks GPU 1's Xid"; }
finish_job xid
expect_eq "Xid 79 warnings on the console (two events, one line)" 1 "$(grep -c 'reported Xid 79' "$T/xid.err")"
grep -qE 'ignores LOCAL_RANK|is throttled|has no process' "$T/xid.err" && { cat "$T/xid.err" >&2; fail "job xid was warned of something else"; }

# --- off, and a bad value ---
scenario off 0 0 0x44
agent off MUSTER_NVML_LIBRARY="$FAKE_NVML" FAKE_NVML_SCENARIO="$T/off.scn" WDIR="$T/w" JOB=off \
    -- --nnodes 1 --nproc-per-node 2 --no-python --gpu-telemetry off \
    --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id off "$T/w.sh"
wait_for 30 test -s "$T/w/pid.off.1" || { show_agent off; fail "job off did not start"; }
sleep 1.5
job_status off
expect_eq "telemetry with --gpu-telemetry off" null "$(jq -c '.nodes[0].telemetry' "$T/job.json")"
finish_job off
grep -q 'LOCAL_RANK' "$T/off.err" && fail "--gpu-telemetry off warned"
mrun -- run --gpu-telemetry 0.1 --no-python /bin/true
expect_eq "--gpu-telemetry 0.1's exit" 2 "$RC"
grep -q -- "--gpu-telemetry must be off or a number of seconds from 0.5 to 60, not '0.1'" "$T/err" \
    || { cat "$T/err" >&2; fail "no clear error for --gpu-telemetry 0.1"; }
stop_server
exit 0
