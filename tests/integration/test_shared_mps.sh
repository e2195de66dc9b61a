#!/bin/bash
# Shared-GPU mode with --mps, against a fake nvidia-cuda-mps-control and nvidia-smi
# (tests/integration/mock/): the daemon gets its own pipe/log directories and the GPUs in use,
# every worker the pipe directory and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, and the daemon is told
# to quit (and is gone, its directory removed) on every way muster ends. Without the control
# program --mps fails before any worker starts and --mps=auto runs without MPS.
. "$(dirname "$0")/lib.sh"

W="$IT_DIR/mock/shared_worker.sh"
MOCK="$IT_DIR/mock"
R="$T/mps.record"
export MOCK_MPS_RECORD="$R"

# daemon_gone: none of the fake daemons of the record ("daemon PID" lines) runs; a zombie
# (an orphan that no init reaped yet) counts as gone
daemon_gone() {
    local pid state
    for pid in $(awk '$1 == "daemon" {print $2}' "$R" 2>/dev/null); do
        state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
        [ -n "$state" ] && [ "$state" != Z ] && return 1
    done
    return 0
}

# check_stopped CONTEXT: "quit" recorded after the last start, the daemon gone, the run
# directory removed
check_stopped() {
    [ "$(tail -n 1 "$R" | cut -d' ' -f1)" = quit ] || fail "$1: no quit after the start: $(cat "$R")"
    daemon_gone || fail "$1: the fake MPS daemon is still running"
    local pipe
    pipe=$(awk '$1 == "start" {sub("pipe=", "", $3); p = $3} END {print p}' "$R")
    [ -n "$pipe" ] || fail "$1: no start recorded"
    [ -e "$pipe" ] && fail "$1: the run directory $(dirname "$pipe") was not removed"
    grep -q 'MPS daemon stopped' "$T/err" || { show_output; fail "$1: no 'MPS daemon stopped' line"; }
    grep -q 'did not quit' "$T/err" && { show_output; fail "$1: the daemon had to be killed"; }
    return 0
}

# (1) no control program: --mps -> exit 2, one clear line, no worker; --mps=auto -> warning, runs
if [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] || [ -x /usr/bin/nvidia-cuda-mps-control ]; then
    note "a real nvidia-cuda-mps-control is installed: skipping the 'not found' part"
else
    D="$T/nf"; mkdir -p "$D"
    mrun CUDA_VISIBLE_DEVICES=0 PATH=/usr/bin:/bin -- run --nproc-per-gpu 2 --mps --gpu-mem 80GiB \
        --no-python "$W" loop "$D" 1
    expect_rc "--mps without nvidia-cuda-mps-control" 2
    grep -qxF 'muster: error: --mps: nvidia-cuda-mps-control not found (install the NVIDIA driver'"'"'s MPS tools or run without --mps)' "$T/err" \
        || { show_output; fail "no clear 'not found' line"; }
    [ "$(count_files "$D"/starts.*)" = 0 ] || fail "a worker started although --mps failed"
    mrun CUDA_VISIBLE_DEVICES=0 PATH=/usr/bin:/bin -- run --nproc-per-gpu 2 --mps=auto \
        --no-python "$W" loop "$D" 1
    expect_rc "--mps=auto without nvidia-cuda-mps-control" 0
    [ "$(grep -c 'warning: --mps=auto' "$T/err")" = 1 ] || { show_output; fail "no single warning line"; }
    [ "$(count_files "$D"/starts.*)" = 2 ] || fail "--mps=auto did not run both tasks"
    envval "$D/env.0.0" CUDA_MPS_PIPE_DIRECTORY > /dev/null && fail "MPS variables without a daemon"
fi

MP="$MOCK:$PATH"

# (2) all tasks succeed: GPUs 1,3 x 2, --gpu-mem 80GiB, F 0.85 -> floor(81920 * 0.85 / 2) MiB
D="$T/ok"; mkdir -p "$D"; : > "$R"
mrun CUDA_VISIBLE_DEVICES=1,3 PATH="$MP" -- run --nproc-per-gpu 2 --mps --gpu-mem 80GiB \
    --no-python "$W" loop "$D" 3
expect_rc "--mps, all tasks succeed" 0
start=$(grep '^start' "$R")
pipe=$(echo "$start" | sed -n 's/.* pipe=\([^ ]*\).*/\1/p')
expect_eq "daemon's CUDA_VISIBLE_DEVICES" "visible=1,3" "$(echo "$start" | grep -o 'visible=[^ ]*')"
echo "$start" | grep -q "log=$(dirname "$pipe")/log" || fail "daemon's log directory: $start"
for t in 0 1 2 3; do
    e="$D/env.$t.0"
    expect_eq "task $t CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" "0=34816M" "$(envval "$e" CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)"
    expect_eq "task $t CUDA_MPS_PIPE_DIRECTORY" "$pipe" "$(envval "$e" CUDA_MPS_PIPE_DIRECTORY)"
    expect_eq "task $t CUDA_MPS_LOG_DIRECTORY" "$(dirname "$pipe")/log" "$(envval "$e" CUDA_MPS_LOG_DIRECTORY)"
    # the daemon renumbers its GPUs 0..n-1: GPU 3 is its device 1
    expect_eq "task $t CUDA_VISIBLE_DEVICES" "$((t / 2))" "$(envval "$e" CUDA_VISIBLE_DEVICES)"
    expect_eq "task $t MUSTER_GPU_MEM_FRACTION" 0.4250 "$(envval "$e" MUSTER_GPU_MEM_FRACTION)"
done
check_stopped "all tasks succeeded"
grep -q 'MPS daemon started' "$T/err" || fail "no 'MPS daemon started' line"
[ "$(grep -c 'share a fault domain' "$T/err")" = 1 ] || fail "the fault-domain note is not there once"

# (3) GPU memory from nvidia-smi (143156 MiB, K 4: floor(143156 * 0.85 / 4) = 30420)
D="$T/smi"; mkdir -p "$D"; : > "$R"
mrun CUDA_VISIBLE_DEVICES=2 PATH="$MP" MOCK_SMI_MIB=143156 -- run --nproc-per-gpu 4 --mps \
    --no-python "$W" loop "$D" 1
expect_rc "--mps, memory from nvidia-smi" 0
grep -qF 'nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 2' "$R" \
    || fail "nvidia-smi not asked as expected: $(cat "$R")"
expect_eq "cap from nvidia-smi" "0=30420M" "$(envval "$D/env.3.0" CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)"
check_stopped "memory from nvidia-smi"
# ... and when nvidia-smi cannot tell: exit 2 before anything starts
D="$T/nosmi"; mkdir -p "$D"; : > "$R"
mrun CUDA_VISIBLE_DEVICES=2 PATH="$MP" -- run --nproc-per-gpu 2 --mps --no-python "$W" loop "$D" 1
expect_rc "--mps, GPU memory unknown" 2
grep -qF 'cannot learn the GPU memory for the MPS cap; pass --gpu-mem SIZE' "$T/err" || { show_output; fail "no --gpu-mem hint"; }
grep -q '^start' "$R" && fail "the daemon was started although the memory is unknown"
[ "$(count_files "$D"/starts.*)" = 0 ] || fail "a worker started"

# (4) a task fails finally: its code, and the daemon stopped
D="$T/fail"; mkdir -p "$D"; : > "$R"
mrun CUDA_VISIBLE_DEVICES=0 PATH="$MP" -- run --nproc-per-gpu 2 --mps --gpu-mem 80GiB \
    --no-python "$W" always "$D" 1 9
expect_rc "--mps, task 1 exits 9" 9
check_stopped "a task failed"

# (5) SIGTERM to muster
D="$T/term"; mkdir -p "$D"; : > "$R"
mrun_bg CUDA_VISIBLE_DEVICES=0,1 PATH="$MP" -- run --nproc-per-gpu 2 --mps --gpu-mem 80GiB \
    --no-python "$W" sleep "$D"
wait_for 20 files_at_least 4 "$D/up.*" || { show_output; fail "the 4 tasks did not start"; }
kill -TERM "$MPID"
wait_rc "$MPID" 30
expect_rc "--mps, SIGTERM" 143
check_stopped "SIGTERM"

# (6) the worker program cannot be executed (bad interpreter): 127, daemon stopped
D="$T/noexec"; mkdir -p "$D"; : > "$R"
printf '#!/nonexistent/interpreter\n' > "$T/bad.sh"; chmod +x "$T/bad.sh"
mrun CUDA_VISIBLE_DEVICES=0 PATH="$MP" -- run --nproc-per-gpu 2 --mps --gpu-mem 80GiB \
    --no-python "$T/bad.sh"
expect_rc "--mps, worker cannot be executed" 127
check_stopped "worker cannot be executed"

# (7) the daemon does not start: --mps -> error before any worker, --mps=auto -> plain sharing
D="$T/nostart"; mkdir -p "$D"; : > "$R"
mrun CUDA_VISIBLE_DEVICES=0 PATH="$MP" MOCK_MPS_FAIL_START=1 -- run --nproc-per-gpu 2 --mps \
    --gpu-mem 80GiB --no-python "$W" loop "$D" 1
expect_rc "--mps, daemon fails to start" 70
grep -q 'error: --mps: .*-d exited with code 1' "$T/err" || { show_output; fail "no start failure line"; }
[ "$(count_files "$D"/starts.*)" = 0 ] || fail "a worker started although the daemon failed"
mrun CUDA_VISIBLE_DEVICES=0 PATH="$MP" MOCK_MPS_FAIL_START=1 -- run --nproc-per-gpu 2 --mps=auto \
    --gpu-mem 80GiB --no-python "$W" loop "$D" 1
expect_rc "--mps=auto, daemon fails to start" 0
grep -q 'warning: --mps=auto: .*-d exited with code 1' "$T/err" || { show_output; fail "no warning"; }
envval "$D/env.0.0" CUDA_MPS_PIPE_DIRECTORY > /dev/null && fail "MPS variables without a daemon"

assert_no_marked_left "end of test" 5
exit 0
