#!/bin/bash
# GPU telemetry in shared-GPU mode (--nproc-per-gpu, agent/shared.c: no server, the console
# only), with the fake NVML (tests/peers/fake_nvml.c) loaded by the agent's own dlopen: 4 tasks
# given GPU 0 of a 2-GPU node (CUDA_VISIBLE_DEVICES=0, --gpu-mem-fraction 0.8: a cap of 16 GiB
# each of 80 GiB), GPU 1 idle.
# warn: task 2 holds 15.5 GiB (97 % of its cap), task 3's process sits on GPU 1: the console says
#   "task 2 (GPU 0 of HOST) uses 15.5 GiB of its 16.0 GiB memory cap (97 %)" and, past the grace
#   (1.5 s by MUSTER_TELEMETRY_GRACE_MS), "GPU 0 of HOST has no process of task 3", each once;
#   never "ignores LOCAL_RANK" (4 tasks on their one GPU while GPU 1 idles is the plan).
# healthy: every task on GPU 0 at 10 GiB: no warning at all, past the grace.
# off: --gpu-telemetry off with the bad scenario: no warning.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

[ -n "${FAKE_NVML:-}" ] && [ -f "$FAKE_NVML" ] || skip "FAKE_NVML (the fake libnvidia-ml.so) is not built"

mkdir -p "$T/w"
cat > "$T/w.sh" <<'SH'
#!/bin/bash
echo $$ > "$WDIR/pid.$JOB.$MUSTER_TASK_INDEX"
for _ in $(seq 300); do [ -e "$WDIR/stop.$JOB" ] && exit 0; sleep 0.1; done
exit 0
SH
chmod +x "$T/w.sh"
GiB=1073741824
MiB=1048576

# scenario JOB MEM_OF_TASK2 GPU_OF_TASK3
scenario() {
    cat > "$T/$1.scn" <<SCN
# util used total sm mem temp power_mw throttle
gpu 90 $((50 * GiB)) $((80 * GiB)) 1980 2619 61 412000 0
gpu 0 $((1 * GiB)) $((80 * GiB)) 1980 2619 40 90000 0
proc 0 $T/w/pid.$1.0 $((10 * GiB))
proc 0 $T/w/pid.$1.1 $((10 * GiB))
proc 0 $T/w/pid.$1.2 $2
proc $3 $T/w/pid.$1.3 $((10 * GiB))
SCN
}

# shared JOB [OPTION...]: muster run of 4 tasks on GPU 0, in the background
shared() {
    local job=$1
    shift
    agent "$job" MUSTER_NVML_LIBRARY="$FAKE_NVML" FAKE_NVML_SCENARIO="$T/$job.scn" WDIR="$T/w" \
        JOB="$job" MUSTER_TELEMETRY_GRACE_MS=1500 CUDA_VISIBLE_DEVICES=0 -- --nproc-per-gpu 4 \
        --gpu-mem-fraction 0.8 --no-python --rdzv-id "$job" "$@" "$T/w.sh"
}

all_started() {
    for t in 0 1 2 3; do [ -s "$T/w/pid.$1.$t" ] || return 1; done
}

# --- warn ---
scenario warn $((15 * GiB + 512 * MiB)) 1
shared warn --gpu-telemetry 0.5
wait_for 30 all_started warn || { show_all; fail "job warn: the tasks did not start"; }
cap_line() { grep -q "task 2 (GPU 0 of .*) uses 15.5 GiB of its 16.0 GiB memory cap (97 %): it will fail to allocate more" "$T/warn.err"; }
noproc_line() { grep -q "GPU 0 of .* has no process of task 3 after [0-9]* s" "$T/warn.err"; }
wait_for 20 cap_line || { show_all; fail "job warn: no memory-cap warning"; }
wait_for 20 noproc_line || { show_all; fail "job warn: no 'no process of task 3' warning"; }
sleep 2 # more samples: each said once
expect_eq "cap warnings" 1 "$(grep -c 'memory cap' "$T/warn.err")"
expect_eq "no-process warnings" 1 "$(grep -c 'has no process of task' "$T/warn.err")"
grep -q "ignores LOCAL_RANK" "$T/warn.err" && { show_all; fail "shared-GPU tasks on their GPU were taken for a script ignoring LOCAL_RANK"; }
grep -Eq "memory cap.*task (0|1|3)|task (0|1|3) .*memory cap" "$T/warn.err" && { show_all; fail "a task under its cap was warned of"; }
touch "$T/w/stop.warn"
agents_exit 30 0 warn

# --- healthy ---
scenario good $((10 * GiB)) 0
shared good --gpu-telemetry 0.5
wait_for 30 all_started good || { show_all; fail "job good: the tasks did not start"; }
sleep 3 # twice the grace, 6 samples
touch "$T/w/stop.good"
agents_exit 30 0 good
grep -Ei "memory cap|no process|LOCAL_RANK|throttled" "$T/good.err" && { show_all; fail "the healthy shared job was warned of"; }

# --- off ---
scenario off $((15 * GiB + 512 * MiB)) 1
shared off --gpu-telemetry off
wait_for 30 all_started off || { show_all; fail "job off: the tasks did not start"; }
sleep 3
touch "$T/w/stop.off"
agents_exit 30 0 off
grep -Ei "memory cap|no process" "$T/off.err" && { show_all; fail "--gpu-telemetry off still sampled"; }
exit 0
