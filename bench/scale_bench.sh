#!/bin/bash
# Rendezvous scaling: simulated TLS agents (build/bench/loadgen, from bench/loadgen.c)
# against one `muster server`
# on this machine, from 100 to 10,000 agents; a fresh server per run.
#
#   bench/scale_bench.sh [SIZES...]          (default: 100 300 1000 3000 10000)
#
# Environment:
#   MUSTER_BIN   muster binary (default <repo>/build/muster); BUILD_DIR its build folder
#   MODES        "plain ecdhe" (default): plain = agents offer plain PSK only (--rdzv-conf
#                forward_secrecy=0), ecdhe = ECDHE-PSK (the default, forward secrecy)
#   ECDHE_MAX    largest size run in ecdhe mode (default 3000: 10,000 ECDHE handshakes on 2
#                shared cores take minutes)
#   PROCS        loadgen processes (default: the number of cores)
#   JOBS_RUN     also run 1,000 jobs x 10 agents (default 1)
#   TIMEOUT      loadgen's limit in s (default 300)
#   ROUNDS       coordinated restart rounds per restart run (default 5; 0: no restart runs): when
#                every agent holds its ASSIGN, one agent sends FAILED, every agent answers the
#                RESTART with its JOIN on its connection (loadgen -R); timed FAILED -> last new
#                ASSIGN
#   RESTART_SIZES  agents in the one job of the restart runs (default 10000)
#   KEEPALIVE    the restart runs' agent heartbeat intervals in ms, one run each (default
#                "0 1000": none, and a real agent's default keep_alive_interval of 1 s)
#   LOADGEN      a prebuilt loadgen binary (e.g. a static one carried to a host without libuv/
#                mbedTLS/jansson/xxhash, tests/gpu/scale.sh); unset: compiled here as below
# Per run one line: mode, agents, jobs, first connect -> last ASSIGN (ms), the server's peak
# RSS (VmHWM, MB) and per agent (KB, above a server with no connection), and the server's CPU
# time per join (user + system, /proc/PID/stat, µs). A restart run's line: mode, agents, jobs=1,
# restart_rounds, heartbeat interval, the round's time FAILED -> last ASSIGN (median, min, max
# over the rounds, ms) and the server's and the generator's CPU time per round (medians, ms).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
MUSTER_BIN=${MUSTER_BIN:-$SRC/build/muster}
BUILD_DIR=${BUILD_DIR:-$(dirname "$MUSTER_BIN")}
SIZES=${*:-100 300 1000 3000 10000}
MODES=${MODES:-plain ecdhe}
PROCS=${PROCS:-$(nproc)}
W=$(mktemp -d "${TMPDIR:-/tmp}/muster-scale.XXXXXX")
trap 'kill $SPID 2>/dev/null; rm -rf "$W"' EXIT
SPID=
ulimit -n "$(ulimit -Hn)" 2>/dev/null
export MUSTER_TOKEN=${MUSTER_TOKEN:-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')}
# LOADGEN: a loadgen binary (a GPU host's copy); else the one CMake built beside MUSTER_BIN
LOADGEN=${LOADGEN:-$BUILD_DIR/bench/loadgen}
[ -x "$LOADGEN" ] || { echo "no loadgen at $LOADGEN (cmake --build $BUILD_DIR --target loadgen)" >&2; exit 1; }
cp "$LOADGEN" "$W/loadgen" || exit 1

# run MODE AGENTS JOBS [ROUNDS KEEPALIVE_MS]
run() {
    local mode=$1 n=$2 jobs=$3 rounds=${4:-0} ka=${5:-0} flag="" base out
    [ "$mode" = plain ] && flag=-P
    [ "$rounds" -gt 0 ] && flag="$flag -R $rounds -K $ka"
    "$MUSTER_BIN" server --listen 127.0.0.1:0 2> "$W/srv.err" &
    SPID=$!
    for _ in $(seq 100); do grep -q 'server listening on' "$W/srv.err" && break; sleep 0.05; done
    local port
    port=$(sed -n 's/.*server listening on .*:\([0-9][0-9]*\).*/\1/p' "$W/srv.err" | head -1)
    base=$(awk '/^VmRSS:/ {print $2}' "/proc/$SPID/status")
    # shellcheck disable=SC2086 # $flag: none or several words
    out=$("$W/loadgen" -e "127.0.0.1:$port" -n "$n" -j "$jobs" -T "$PROCS" $flag \
        -t "${TIMEOUT:-300}" -p "$SPID" 2>&1 | tail -1)
    kill -TERM "$SPID"; wait "$SPID" 2>/dev/null; SPID=
    echo "$out" | awk -v m="$mode" -v n="$n" -v j="$jobs" -v base="$base" -v r="$rounds" -v ka="$ka" '
        /agents=/ && r > 0 {
            for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            printf "%-6s agents=%-6d jobs=%-5d restart_rounds=%d keep_alive_ms=%-4d restart_round_ms_median=%-7s min=%-7s max=%-7s server_cpu_ms_median=%-5s loadgen_cpu_ms_median=%s\n",
                m, n, j, r, ka, v["restart_round_ms_median"], v["restart_round_ms_min"],
                v["restart_round_ms_max"], v["restart_server_cpu_ms_median"],
                v["restart_loadgen_cpu_ms_median"]
            ok = 1
            next
        }
        /agents=/ {
            for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            printf "%-6s agents=%-6d jobs=%-5d assign_all_ms=%-8s server_peak_mb=%-6.1f per_agent_kb=%-5.1f cpu_us_per_join=%s\n",
                m, n, j, v["assign_all_ms"], v["server_vmhwm_kb"] / 1024,
                (v["server_vmhwm_kb"] - base) / n, v["server_cpu_us_per_join"]
            ok = 1
        }
        END {
            if (ok) exit
            what = ""
            if (r > 0) what = "restart_rounds=" r " "
            printf "%-6s agents=%-6d jobs=%-5d %sFAILED: %s\n", m, n, j, what, $0
        }'
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(nproc) cores, $(uname -r), loadgen -T $PROCS; $(uptime | sed 's/.*load/load/')"
for mode in $MODES; do
    for n in $SIZES; do
        [ "$mode" = ecdhe ] && [ "$n" -gt "${ECDHE_MAX:-3000}" ] && continue
        run "$mode" "$n" 1
    done
done
if [ "${JOBS_RUN:-1}" = 1 ]; then
    for mode in $MODES; do
        [ "$mode" = ecdhe ] && [ 10000 -gt "${ECDHE_MAX:-3000}" ] && continue
        run "$mode" 10000 1000
    done
fi
if [ "${ROUNDS:-5}" -gt 0 ]; then
    for mode in $MODES; do
        for n in ${RESTART_SIZES:-10000}; do
            [ "$mode" = ecdhe ] && [ "$n" -gt "${ECDHE_MAX:-3000}" ] && continue
            for ka in ${KEEPALIVE:-0 1000}; do
                run "$mode" "$n" 1 "${ROUNDS:-5}" "$ka"
            done
        done
    done
fi
