#!/bin/bash
# The health check before a restart round (docs/PREFLIGHT.md), with the stand-in muster-preflight
# (tests/integration/mock/muster-preflight, its `health` command) and a fake driver directory of
# 2 "GPUs" (MUSTER_NVIDIA_PROC_DIR: the agent's real GPU count), --preflight off, on loopback:
#   1. spare: a fixed-size job (--nnodes 2) of a, b and a spare s (one worker each). b's worker
#      exits 7; b (whose rank failed) runs the check once, before its JOIN, with the pid of its
#      dead worker; its GPU 0 reports an ECC error (MOCK_HEALTH_FAIL_GPU=0 on b only), so b says
#      which GPU and why, leaves and exits 4; a (no failed rank) runs no check; s takes b's place
#      at once and the job ends with a and s (exit 0), one restart;
#   2. passed: a and b again without a spare; b's worker fails, b's check passes (it is told the
#      pids of its ended workers, which the stand-in proves are gone), a checks too under
#      --health-check always, and the job ends with both nodes in round 1;
#   3. timeout, no spare, --nnodes 1:2: b's check hangs (MOCK_HEALTH_HANG=0); --health-timeout 2
#      kills it, b exits 4 naming the GPU, and the round goes on with a alone;
#   4. off: --health-check off on b: its worker fails, no check runs, it rejoins (debug line);
#   5. CPU job: no GPU in the driver directory: b's worker fails, the restart works as before,
#      and b says (debug) that it skips the check for want of a GPU;
#   6. a lying check: b's reason has terminal escapes, a forged second line and 5000 bytes;
#      b's line shows them as '?' and cut, one line; the server takes its LEAVE (the spare
#      replaces it at once, the connection was not dropped for a bad text);
#   7. a hung rank (silent past --hang-timeout, killed by b's agent): b checks its GPU with the
#      hung worker's pid before it rejoins; a does not; the job ends in round 1.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

MOCK=$MUSTER_SRC/tests/integration/mock/muster-preflight
FAKE=$T/gpus
mkdir -p "$FAKE/0000:10:00.0" "$FAKE/0000:11:00.0"
unset CUDA_VISIBLE_DEVICES
FTW=$IT_DIR/ft_worker.sh
HLOG=$T/health.log
mkdir -p "$T/tmp" # the agents' temporary files (the check's reason file): ours alone
ENVS=(MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_HEALTH_LOG="$HLOG"
    TMPDIR="$T/tmp")

# common NNODES: the options every agent of one job gets (common_args)
common() {
    common_args=(--nnodes "$1" --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB
        --rdzv-conf join_timeout=60,last_call_timeout=1,keep_alive_interval=0.5,heartbeat_timeout=3
        --max-restarts 3 --checkpoint-dir "$C" --preflight off -v)
}
work() { work_args=(--nproc-per-node 1 --no-python "$FTW" spare "$T/w"); }
work

# b's failing worker's pid, from b's "worker rank R (local_rank 0, pid N) exited ..." line
dead_pid() {
    sed -n 's/.*worker rank [0-9]* (local_rank 0, pid \([0-9]*\)).*/\1/p' "$T/$1.err" | head -1
}

# ---- 1. the failed node is excluded by its check, a spare takes its place ----
start_job hspare
C=$T/ckpt1 && mkdir -p "$C"
common 2
: >"$HLOG"
agent s NODE=s "${ENVS[@]}" -- "${common_args[@]}" --spare --local-addr 127.0.0.3 "${work_args[@]}"
wait_for 20 grep -q "joining job $JOB as a spare" "$T/s.err" || { show_all; fail "the spare did not join"; }
agent a NODE=a "${ENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.1 "${work_args[@]}"
wait_for 20 grep -q "rendezvous $JOB: 1/2 nodes" "$T/a.err" || { show_all; fail "a did not wait at 1/2 nodes"; }
agent b NODE=b FAIL=1 MOCK_HEALTH_FAIL_GPU=0 "${ENVS[@]}" -- "${common_args[@]}" \
    --local-addr 127.0.0.2 "${work_args[@]}"
wait_for 30 files_at_least 2 "$T/w/ready.*.0" || { show_all; fail "round 0 did not start"; }
wait_for 30 test -e "$T/w/ckpt.done" || { show_all; fail "rank 0 did not record its checkpoints"; }
expect_eq "node of group rank 1 in round 0" b "$(envval "$T/w/env.1.0" NODE)"
t_go=$(now_ms)
: >"$T/w/go"
agent_wait b 40
expect_agent_rc b 4
grep -q "health check before the restart round: 1 GPU" "$T/b.err" || { show_agent b; fail "b did not start the check"; }
grep -q "health check failed on .*: GPU 0 (GPU-00000000-aaaa-bbbb-cccc-dddddddddddd, 0000:10:00.0): NVML: 1 uncorrectable ECC error(s) since the driver loaded; this node leaves the job (exit 4)" "$T/b.err" \
    || { show_agent b; fail "b's failure line does not name the GPU and the reason"; }
wait_for 30 files_at_least 2 "$T/w/ready.*.1" || { show_all; fail "round 1 did not start with the spare"; }
took=$(($(now_ms) - t_go))
note "b's worker failed -> round 1 running with the spare after b's health check: $took ms"
[ "$took" -lt 10000 ] || fail "round 1 took $took ms: the spare should replace b at once"
expect_eq "node of group rank 1 in round 1 (b's place)" s "$(envval "$T/w/env.1.1" NODE)"
agents_exit 40 0 a s
[ "$(grep -c '^health ' "$HLOG")" = 1 ] || fail "not one check (b's GPU 0) in all: $(cat "$HLOG")"
pid=$(dead_pid b)
[ -n "$pid" ] || { show_agent b; fail "no pid in b's failure line"; }
grep -q "^health DEVICE=0 PIDS=$pid DRAIN=10000 REASON=/" "$HLOG" \
    || fail "b's check was not told its dead worker's pid $pid: $(cat "$HLOG")"
grep -q "health check" "$T/a.err" && { show_agent a; fail "a (no failed rank) ran a health check"; }
grep -q 'restart 2/3' "$T/a.err" "$T/s.err" && { show_all; fail "b leaving cost a second restart"; }
ls "$T/tmp" | grep -q '^muster-health-reason-' && fail "the reason file was left behind"
stop_server

# ---- 2. the check passes: the node rejoins ----
rm -rf "$T/w" && mkdir -p "$T/w"
start_job hpass
C=$T/ckpt2 && mkdir -p "$C"
common 2
: >"$HLOG"
agent a NODE=a "${ENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.1 --health-check always \
    "${work_args[@]}"
agent b NODE=b FAIL=1 "${ENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.2 \
    --shutdown-timeout 1 --nproc-per-node 2 --no-python "$FTW" spare "$T/w"
wait_for 30 test -e "$T/w/ckpt.done" || { show_all; fail "round 0 did not record its checkpoints"; }
: >"$T/w/go"
agents_exit 60 0 a b
grep -q "health check before the restart round: 2 GPUs" "$T/b.err" || { show_agent b; fail "b did not check its 2 GPUs"; }
grep -q "health check passed in" "$T/b.err" || { show_agent b; fail "b's check did not pass"; }
# b's 2 GPUs, and a's 1 (--health-check always: its rank did not fail)
[ "$(grep -c '^health DEVICE=[01] ' "$HLOG")" = 3 ] || fail "not one check per GPU of b and a's: $(cat "$HLOG")"
grep -q "health check passed in .* (1 GPU)" "$T/a.err" || { show_agent a; fail "a did not check under always"; }
pid=$(dead_pid b)
grep -q "^health DEVICE=1 PIDS=[0-9,]*$pid" "$HLOG" || fail "b's check lacks its dead worker $pid: $(cat "$HLOG")"
[ "$(grep '^health DEVICE=1 ' "$HLOG" | grep -o 'PIDS=[0-9,]*' | tr -cd , | wc -c)" = 1 ] \
    || fail "b's check was not told both workers of the ended attempt: $(cat "$HLOG")"
check_ranks "$T/w" 1 3 2
# the check ran between b's failure and its workers of round 1
tcheck=$(awk '{print $NF}' "$HLOG" | sort -n | tail -1)
for r in 1 2; do
    w=$(date -r "$T/w/env.$r.1" +%s%N)
    [ "$w" -gt "$tcheck" ] || fail "b's round-1 worker rank $r started before its health check"
done
stop_server

# ---- 3. the check hangs: killed after --health-timeout; no spare, the round shrinks ----
rm -rf "$T/w" && mkdir -p "$T/w"
start_job htime
C=$T/ckpt3 && mkdir -p "$C"
common 1:2
: >"$HLOG"
# both at once: --nnodes 1:2 with a 1 s last call would start round 0 with the first alone
agent a NODE=a "${ENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.1 "${work_args[@]}"
agent b NODE=b FAIL=1 MOCK_HEALTH_HANG=0 "${ENVS[@]}" -- "${common_args[@]}" \
    --local-addr 127.0.0.2 --health-timeout 2 "${work_args[@]}"
wait_for 30 test -e "$T/w/ckpt.done" || { show_all; fail "round 0 did not record its checkpoints"; }
wait_for 30 files_at_least 2 "$T/w/ready.*.0" || { show_all; fail "round 0 lacks b"; }
t_go=$(now_ms)
: >"$T/w/go"
agent_wait b 30
took=$(($(now_ms) - t_go))
expect_agent_rc b 4
grep -q "health check: GPU 0 did not finish within 2.0 s (--health-timeout); killing the check" "$T/b.err" \
    || { show_agent b; fail "b did not say its check timed out"; }
grep -q "health check on .* did not finish within 2.0 s (--health-timeout): GPU 0 may be hung; this node leaves" "$T/b.err" \
    || { show_agent b; fail "b's failure line does not name the hung GPU"; }
[ "$took" -lt 15000 ] || fail "b took $took ms to give up a 2 s check"
agents_exit 40 0 a
ls "$T/w" | grep -q '^ready\.0\.1$' || fail "a did not run round 1 alone"
ls "$T/w" | grep -q '^env\.1\.1$' && fail "round 1 had a second node"
pgrep -f "sleep 600" -u "$(id -u)" >/dev/null && {
    for p in $(pgrep -f "sleep 600" -u "$(id -u)"); do
        grep -q "$T" "/proc/$p/environ" 2>/dev/null && fail "the hung check (pid $p) was left running"
    done
}
stop_server

# ---- 4. --health-check off: no check, the node rejoins ----
rm -rf "$T/w" && mkdir -p "$T/w"
start_job hoff
C=$T/ckpt4 && mkdir -p "$C"
common 2
: >"$HLOG"
agent a NODE=a "${ENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.1 "${work_args[@]}"
agent b NODE=b FAIL=1 MOCK_HEALTH_FAIL_GPU=0 "${ENVS[@]}" -- "${common_args[@]}" \
    --local-addr 127.0.0.2 --health-check off "${work_args[@]}"
wait_for 30 test -e "$T/w/ckpt.done" || { show_all; fail "round 0 did not record its checkpoints"; }
: >"$T/w/go"
agents_exit 60 0 a b
[ -s "$HLOG" ] && fail "a check ran under --health-check off: $(cat "$HLOG")"
grep -q "health check off (--health-check off): rejoining without it" "$T/b.err" \
    || { show_agent b; fail "b did not say (debug) that the check is off"; }
stop_server

# ---- 5. a CPU job (no GPU on the node): the check is skipped, the restart works ----
rm -rf "$T/w" && mkdir -p "$T/w" "$T/nogpus"
start_job hcpu
C=$T/ckpt5 && mkdir -p "$C"
common 2
: >"$HLOG"
CPUENVS=(MUSTER_NVIDIA_PROC_DIR="$T/nogpus" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_HEALTH_LOG="$HLOG"
    TMPDIR="$T/tmp")
agent a NODE=a "${CPUENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.1 "${work_args[@]}"
agent b NODE=b FAIL=1 MOCK_HEALTH_FAIL_GPU=0 "${CPUENVS[@]}" -- "${common_args[@]}" \
    --local-addr 127.0.0.2 "${work_args[@]}"
wait_for 30 test -e "$T/w/ckpt.done" || { show_all; fail "round 0 did not record its checkpoints"; }
: >"$T/w/go"
agents_exit 60 0 a b
[ -s "$HLOG" ] && fail "a check ran on a node without GPUs: $(cat "$HLOG")"
grep -q "health check skipped: no GPU on this node (CPU job)" "$T/b.err" \
    || { show_agent b; fail "b did not say (debug) that it skips the check without a GPU"; }
check_ranks "$T/w" 1 2 2
stop_server

# ---- 6. a lying check's reason: sanitised, cut, one line; the LEAVE still reaches the server ----
rm -rf "$T/w" && mkdir -p "$T/w"
start_job hlie
C=$T/ckpt6 && mkdir -p "$C"
common 2
: >"$HLOG"
evil="\\033[31mGPU 0 red\\a\\x7f$(head -c 5000 /dev/zero | tr '\0' x)\\nGPU 9 (forged): all fine"
agent s NODE=s "${ENVS[@]}" -- "${common_args[@]}" --spare --local-addr 127.0.0.3 "${work_args[@]}"
wait_for 20 grep -q "joining job $JOB as a spare" "$T/s.err" || { show_all; fail "the spare did not join"; }
agent a NODE=a "${ENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.1 "${work_args[@]}"
wait_for 20 grep -q "rendezvous $JOB: 1/2 nodes" "$T/a.err" || { show_all; fail "a did not wait at 1/2 nodes"; }
agent b NODE=b FAIL=1 MOCK_HEALTH_FAIL_GPU=0 MOCK_HEALTH_REASON="$evil" "${ENVS[@]}" -- \
    "${common_args[@]}" --local-addr 127.0.0.2 "${work_args[@]}"
wait_for 30 test -e "$T/w/ckpt.done" || { show_all; fail "round 0 did not record its checkpoints"; }
t_go=$(now_ms)
: >"$T/w/go"
agent_wait b 40
expect_agent_rc b 4
line=$(grep "health check failed on" "$T/b.err")
[ "$(wc -l <<<"$line")" = 1 ] || fail "not one failure line: $line"
grep -q $'\033' <<<"$line" && fail "an escape from the check reached the agent's log: $line"
grep -q '?\[31mGPU 0 red??xxx' <<<"$line" || fail "the escapes were not shown as '?': ${line:0:200}"
grep -q 'forged' "$T/b.err" && fail "the forged second line was logged"
[ "${#line}" -lt 1200 ] || fail "the reason was not cut (${#line} bytes)"
wait_for 30 files_at_least 2 "$T/w/ready.*.1" || { show_all; fail "round 1 did not start with the spare"; }
took=$(($(now_ms) - t_go))
[ "$took" -lt 10000 ] || fail "the spare took $took ms to replace b: its LEAVE was not taken"
agents_exit 40 0 a s
stop_server

# ---- 7. a hung rank: its node checks too ----
rm -rf "$T/w" && mkdir -p "$T/w"
start_job hhang
C=$T/ckpt7 && mkdir -p "$C"
common 2
: >"$HLOG"
agent a NODE=a "${ENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.1 --hang-timeout 1 \
    --nproc-per-node 1 --no-python "$FTW" beat "$T/w" 5
wait_for 20 grep -q "rendezvous $JOB: 1/2 nodes" "$T/a.err" || { show_all; fail "a did not wait at 1/2 nodes"; }
agent b NODE=b "${ENVS[@]}" -- "${common_args[@]}" --local-addr 127.0.0.2 --hang-timeout 1 \
    --nproc-per-node 1 --no-python "$FTW" beat "$T/w" 5
agents_exit 60 0 a b
grep -q "hung: no heartbeat" "$T/b.err" || { show_agent b; fail "b's rank did not hang"; }
pid=$(sed -n 's/.*worker rank 1 (local_rank 0, pid \([0-9]*\)).*/\1/p' "$T/b.err" | head -1)
[ -n "$pid" ] || { show_agent b; fail "no pid in b's hang line"; }
grep -q "^health DEVICE=0 PIDS=$pid " "$HLOG" || fail "b's check lacks its hung worker $pid: $(cat "$HLOG")"
[ "$(grep -c '^health ' "$HLOG")" = 1 ] || fail "not one check (b's) in all: $(cat "$HLOG")"
grep -q "health check passed" "$T/b.err" || { show_agent b; fail "b's check did not pass"; }
check_ranks "$T/w" 1 2 2
stop_server
assert_no_marked_left "after the jobs" 5
exit 0
