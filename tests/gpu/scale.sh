#!/bin/bash
# Rendezvous scaling with TLS on, on the GPU host, CPU only, one command from a clean
# tree:
#
#   tests/gpu/scale.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster and loadgen built statically on the build host (the GPU host has no
# libuv/mbedTLS/jansson/xxhash and nothing can be installed there):
#   cmake -S . -B build-gpuscale -DMUSTER_STATIC_DEPS=ON -DMUSTER_PREFLIGHT_GPU=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpuscale -j2 --target muster loadgen
# Only the two binaries (BUILD_DIR/muster, BUILD_DIR/bench/loadgen or BUILD_DIR/loadgen) need
# to travel; the lead's static carry (build-gpucarry/) works as it is. Runs
# bench/scale_bench.sh (its header says what each line holds) with LOADGEN=BUILD_DIR/bench/loadgen: sizes 100 300 1000 3000 10000 agents in one job,
# plain PSK and ECDHE-PSK (ECDHE_MAX, default 10000 here), then 1,000 jobs x 10 agents, with
# PROCS=8 loadgen processes so that the server keeps cores, then the restart runs (issue 29):
# 10,000 agents in one job, ROUNDS (5) coordinated restart rounds each (one agent's FAILED ->
# RESTART to every agent -> each one's JOIN on its connection -> new ASSIGN), without heartbeats
# and with a real agent's 1 s keep-alive. The environment passes SIZES, MODES, ECDHE_MAX,
# PROCS, JOBS_RUN, TIMEOUT, ROUNDS, RESTART_SIZES, KEEPALIVE through.
# Checks: the binaries need none of those libraries; the file-descriptor limit allows 10,000
# agents; every run completed; for 10,000 agents in one job, the targets: first
# connect -> last ASSIGN <= 5 s and server peak RSS <= 200 MB, in each mode run; a restart
# round of 10,000 agents (FAILED -> last new ASSIGN, the median of the run's rounds; min and
# max are printed) <= 1 s in each restart run.
# Results: OUT_DIR/summary.txt and OUT_DIR/table.txt. Exit 0 when every check passed.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_require # a GPU host's run; elsewhere (ctest -L gpu) skipped
B=$(cd "${1:-build-gpuscale}" && pwd)
OUT=${2:-/tmp/muster-gpu-scale}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
: > "$OUT/summary.txt"
FAILS=0
log() { echo "$*" | tee -a "$OUT/summary.txt"; }
pass() { log "PASS $*"; }
fail() { log "FAIL $*"; FAILS=$((FAILS + 1)); }

log "# muster rendezvous scale $(date -u +%FT%TZ) on $(hostname)"
log "$(nproc) cores, $(uname -r), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"), $(awk '/MemTotal/ {printf "MemTotal %.1f GiB", $2 / 1048576}' /proc/meminfo)"
log "ulimit -n soft $(ulimit -n) hard $(ulimit -Hn); fs.nr_open $(cat /proc/sys/fs/nr_open 2>/dev/null); somaxconn $(cat /proc/sys/net/core/somaxconn 2>/dev/null); ip_local_port_range $(cat /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null | tr '\t' ' ')"
# the loadgen: where CMake builds it, or beside muster in a flat carry
LG=bench/loadgen
[ -x "$B/$LG" ] || [ ! -x "$B/loadgen" ] || LG=loadgen
for bin in muster $LG; do
    [ -x "$B/$bin" ] || { fail "$B/$bin missing"; continue; }
    if ldd "$B/$bin" 2>&1 | grep -Eq 'libuv|mbed|jansson|xxhash|not found'; then
        fail "$bin needs libraries this host lacks: $(ldd "$B/$bin" 2>&1 | grep -E 'libuv|mbed|jansson|xxhash|not found' | tr '\n' ' ')"
    else
        pass "$bin: no libuv/mbedTLS/jansson/xxhash needed ($(ldd "$B/$bin" 2>&1 | awk '{print $1}' | tr '\n' ' '))"
    fi
done
[ "$FAILS" = 0 ] || { log "# $FAILS failed"; exit 1; }
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -ge 10100 ]; then pass "hard fd limit $hard allows 10,000 agents"
else fail "hard fd limit $hard is below the ~10,100 fds 10,000 agents need"; fi

export PROCS=${PROCS:-8} ECDHE_MAX=${ECDHE_MAX:-10000} TIMEOUT=${TIMEOUT:-120}
export MUSTER_BIN=$B/muster BUILD_DIR=$B LOADGEN=$B/$LG
log "command: PROCS=$PROCS ECDHE_MAX=$ECDHE_MAX TIMEOUT=$TIMEOUT MODES='${MODES:-plain ecdhe}' JOBS_RUN=${JOBS_RUN:-1} ROUNDS=${ROUNDS:-5} RESTART_SIZES='${RESTART_SIZES:-10000}' KEEPALIVE='${KEEPALIVE:-0 1000}' LOADGEN=$LOADGEN MUSTER_BIN=$MUSTER_BIN bench/scale_bench.sh ${SIZES:-}"
t0=$(date +%s%N)
# shellcheck disable=SC2086
"$SRC/bench/scale_bench.sh" ${SIZES:-} 2>&1 | tee "$OUT/table.txt" | tee -a "$OUT/summary.txt"
log "whole table: $(( ($(date +%s%N) - t0) / 1000000 )) ms"

n=$(grep -c 'FAILED' "$OUT/table.txt")
[ "$n" = 0 ] && pass "every run completed ($(grep -c 'agents=' "$OUT/table.txt") runs)" || fail "$n run(s) failed"
awk '$2 == "agents=10000" && $3 == "jobs=1" && $4 ~ /^assign_all_ms=/ {
        split($4, a, "="); split($5, m, "=");
        printf "%s %s %s\n", $1, a[2], m[2] }' "$OUT/table.txt" |
    while read -r mode ms mb; do
        if awk -v t="$ms" -v m="$mb" 'BEGIN { exit !(t <= 5000 && m <= 200) }'; then
            echo "PASS $mode: 10,000 agents, one job: ${ms} ms <= 5 s, server peak ${mb} MB <= 200 MB"
        else
            echo "FAIL $mode: 10,000 agents, one job: ${ms} ms, server peak ${mb} MB (targets 5 s, 200 MB)"
        fi
    done > "$OUT/targets.txt"
# restart runs: "MODE agents=N jobs=1 restart_rounds=R keep_alive_ms=K restart_round_ms_median=M
# min=A max=B server_cpu_ms_median=S loadgen_cpu_ms_median=L"
awk '$2 == "agents=10000" && $4 ~ /^restart_rounds=/ && $0 !~ /FAILED/ {
        for (i = 4; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        line = sprintf("%s: 10,000 agents, %s restart rounds, keep-alive %s ms: FAILED -> last ASSIGN median %s ms (min %s, max %s), server CPU %s ms, loadgen CPU %s ms a round",
            $1, v["restart_rounds"], v["keep_alive_ms"], v["restart_round_ms_median"], v["min"],
            v["max"], v["server_cpu_ms_median"], v["loadgen_cpu_ms_median"])
        if (v["restart_round_ms_median"] != "" && v["restart_round_ms_median"] + 0 <= 1000)
            print "PASS " line " <= 1 s"
        else
            print "FAIL " line " (target 1 s)"
        n++
    }
    END { if (n == 0 && ENVIRON["ROUNDS"] != "0" && ENVIRON["RESTART_SIZES"] ~ /^$|(^| )10000( |$)/) print "FAIL no restart run of 10,000 agents completed" }' \
    "$OUT/table.txt" >> "$OUT/targets.txt"
while read -r line; do
    log "$line"
    case $line in FAIL*) FAILS=$((FAILS + 1)) ;; esac
done < "$OUT/targets.txt"
log "# $FAILS failed"
[ "$FAILS" = 0 ]
