#!/bin/bash
# Rendezvous benchmarks: muster vs torchrun's c10d rendezvous, on this machine, in one run.
#
#   bench/rdzv_bench.sh [a] [b] [c] [d] [e]    (default: all five)
#
# The rendezvous server is TLS-only: a random token is exported as MUSTER_TOKEN (the TLS
# pre-shared key) for the server, every muster agent and loadgen (unless MUSTER_TOKEN is set);
# torchrun ignores it.
#
# Environment:
#   MUSTER_BIN   muster binary (default <repo>/build/muster)
#   TORCHRUN     torchrun (default /usr/bin/torchrun); TORCHRUN_FIX (default
#                "--redirects 9:0 --tee 9:0", needed by Debian's torch 1.13 on Python 3.11)
#   A_SIZES      agent counts for muster in (a) (default "16 64 1024")
#   A_T_SIZES    agent counts for torchrun in (a) (default "16 64"); A_RUNS runs each (default 3
#                for muster, A_T_RUNS default 1 for torchrun: 64 python agents take minutes here);
#                A_SETTLE / A_T_SETTLE override the settle time in s (muster 0.5 + N/400,
#                torchrun 5 + 1.5 N; muster 0.5 + N/64 since every join is a TLS handshake)
#   B_AGENTS     simulated agents for (b) (default 10000), B_JOBS jobs (default 1), B_RUNS (3),
#                B_TIMEOUT loadgen's limit in s (default 300)
#   C_AGENTS     agents for (c) (default 8), C_RUNS (default 5); C_TORCHRUN=1 also measures
#                torchrun (4 agents); C_WAIT: give up after this many s (default 10)
#   E_RUNS       runs for (e) (default 5), E_MODES pressure kinds (default "tls pre"), E_IDLE idle
#                connections (default 1000), E_SETTLE settle in s for all its runs (default 3),
#                E_WARM at most this many s for the pressure to build up (default 30)
#   D_HB         heartbeat_timeout for (d) in s (default 2), D_RUNS (default 3); needs root + ip
#
# Figures (CLOCK_MONOTONIC, bench/stamp.c):
#   (a) N real agents, one worker each (stamp mark: records its start): the first N-1 agents
#       are started and given time to join (SETTLE), then the last agent is started; figure =
#       the latest worker start minus the last agent's start. The endpoint is hosted by the
#       first agent (muster: free local endpoint; torchrun: c10d is_host), --nnodes N.
#   (b) bench/loadgen: B_AGENTS simulated agents against `muster server` (first connect -> last
#       ASSIGN), the server's VmHWM from /proc after the round.
#   (c) C_AGENTS agents, one `stamp hold` worker each, --nnodes 2:C_AGENTS; kill -9 of one agent;
#       figure = the last survivor's worker SIGTERM stamp minus the kill stamp.
#   (d) 3 hosts as network namespaces + server host; host 3's link is cut; figure = the last
#       survivor's worker SIGTERM stamp minus the cut stamp (must be <= heartbeat_timeout + 0.5 s).
#   (e) (a) with 16 muster agents, without pressure and with E_IDLE idle connections + 1 slowloris
#       trickling a ClientHello (tests/peers/slowloris.c -n 0 -r) on the hosting agent's server for the
#       whole run, started once that server listens, given up to E_WARM s to build up:
#         tls: bench/loadgen -I: connections that finish the TLS handshake and send HELLO, then
#              stay silent (the server cuts them after its 30 s idle timeout; they reconnect);
#         pre: tests/peers/slowloris -r: TCP connections that never send a byte (cut after the 5 s
#              handshake timeout; they reconnect at once).
#       Runs alternate (none, tls, pre); figure = medians and the ratio with / without.
# Raw samples are printed; a summary goes to stdout at the end.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
MUSTER_BIN=${MUSTER_BIN:-$SRC/build/muster}
TORCHRUN=${TORCHRUN:-/usr/bin/torchrun}
TORCHRUN_FIX=${TORCHRUN_FIX---redirects 9:0 --tee 9:0}
PARTS=${*:-a b c d e}
if [ -z "${MUSTER_TOKEN:-}" ]; then
    MUSTER_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
fi
export MUSTER_TOKEN
BUILD_DIR=${BUILD_DIR:-$(dirname "$MUSTER_BIN")}

. "$SRC/bench/lib.sh"
bench_init rdzv_bench
PRESS=""
SUMMARY=""
summ() { SUMMARY="$SUMMARY$*"$'\n'; log "$*"; }

STAMP=$(bench_tool stamp) || exit 1
LOADGEN=$(bench_tool loadgen) || exit 1
SLOWLORIS=$(bench_tool slowloris) || exit 1
now() { "$STAMP" now; }
wait_for() {  # wait_for TIMEOUT_S CMD...
    local end=$(( $(date +%s) + $1 ))
    shift
    until "$@"; do
        [ "$(date +%s)" -ge "$end" ] && return 1
        sleep 0.02
    done
}
free_port() {
    local p
    while :; do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        ss -Htan "( sport = :$p )" | grep -q . || { echo $p; return; }
    done
}
lines() { [ -f "$1" ] && wc -l < "$1" || echo 0; }
kill_all() { local p; for p in $BG; do kill -9 "$p" 2>/dev/null; done; BG=""; }

# ------------------------------------------------------------------ (a) N real agents
a_once() {  # a_once m|t N [none|tls|pre] -> ns from the last agent's start to the latest worker start
    local who=$1 n=$2 press=${3:-none} lg=$W/a.$1.$2.$RANDOM port i t_last settle
    port=$(free_port)
    : > "$lg"
    start_agent() {
        if [ "$who" = m ]; then
            env -u PYTHON_EXEC "$MUSTER_BIN" run --nnodes "$n" --nproc-per-node 1 --rdzv-backend c10d \
                --rdzv-endpoint 127.0.0.1:$port --rdzv-id rb$port --rdzv-conf join_timeout=600 \
                --no-python "$STAMP" mark "$lg" > /dev/null 2>&1 &
        else
            # shellcheck disable=SC2086
            "$TORCHRUN" --nnodes "$n" --nproc_per_node 1 --rdzv_backend c10d \
                --rdzv_endpoint 127.0.0.1:$port --rdzv_id rb$port $TORCHRUN_FIX \
                --monitor_interval 0.1 --no_python "$STAMP" mark "$lg" > /dev/null 2>&1 &
        fi
        BG="$BG $!"
    }
    start_agent
    sleep 0.3  # the first one binds the endpoint and hosts the store / server
    if [ "$press" != none ]; then  # (e): pressure on the hosting agent's server
        wait_for 10 bash -c "ss -Htln '( sport = :$port )' | grep -q ." || { echo "fail(no-server)"; kill_all; return; }
        : > "$W/press.out"
        if [ "$press" = tls ]; then
            "$LOADGEN" -e 127.0.0.1:$port -I "${E_IDLE:-1000}" -t 0 >> "$W/press.out" 2>&1 &
            BG="$BG $!"; PRESS="$PRESS $!"
            "$SLOWLORIS" -e 127.0.0.1:$port -n 0 -r -t 0 > /dev/null 2>&1 &
            BG="$BG $!"; PRESS="$PRESS $!"
            # all idle connections handshaken and welcomed before the measurement starts
            wait_for "${E_WARM:-30}" bash -c "tail -1 '$W/press.out' | grep -o 'welcomed=[0-9]*' | cut -d= -f2 | awk -v n=${E_IDLE:-1000} '{v = \$1} END {exit !(v + 0 >= n)}'"
        else
            "$SLOWLORIS" -e 127.0.0.1:$port -n "${E_IDLE:-1000}" -r -t 0 >> "$W/press.out" 2>&1 &
            BG="$BG $!"; PRESS="$PRESS $!"
            wait_for "${E_WARM:-15}" bash -c "tail -1 '$W/press.out' | grep -q 'open=$((${E_IDLE:-1000} + 1)) '"
        fi
    fi
    for i in $(seq 2 $((n - 1))); do start_agent; done
    # settle: give the n-1 agents time to start and join (python agents take long)
    if [ "$who" = m ]; then settle=${A_SETTLE:-$(awk -v n="$n" 'BEGIN {print 0.5 + n / 64}')}
    else settle=${A_T_SETTLE:-$((5 + n * 3 / 2))}; fi
    sleep "$settle"
    [ "$(lines "$lg")" = 0 ] || { echo "fail(early)"; kill_all; return; }
    [ "$press" != none ] && echo "$press $(tail -1 "$W/press.out")" >> "$W/press.log"
    t_last=$(now)
    start_agent
    if ! wait_for $((60 + n)) bash -c "[ \$(wc -l < '$lg') -ge $n ]"; then
        echo "fail(only-$(lines "$lg")-of-$n-workers)"
        kill_all
        return
    fi
    awk -v t="$t_last" '$1 == "start" {if ($3 > m) m = $3} END {printf "%.0f\n", m - t}' "$lg"
    for p in $PRESS; do kill -TERM "$p" 2>/dev/null; done
    PRESS=""
    for p in $BG; do wait "$p" 2>/dev/null; done
    BG=""
}

if [[ " $PARTS " == *" a "* ]]; then
    # a_sizes m|t NAME RUNS SIZES...: RUNS runs of a_once for each size, then the summary line
    a_sizes() {
        local who=$1 name=$2 runs=$3 n r s v
        shift 3
        for n in "$@"; do
            s=""
            for r in $(seq 1 "$runs"); do
                v=$(a_once "$who" "$n"); s="$s $v"
                log "(a) ${name%% *} $n agents run $r: $v ns"
            done
            summ "(a) $name $n agents: median $(ms "$(tr ' ' '\n' <<< "$s" | grep -E '^[0-9]+$' | median)") ms; raw ns:$s"
        done
    }
    # shellcheck disable=SC2086
    a_sizes m "muster  " "${A_RUNS:-3}" ${A_SIZES-16 64 1024}
    if command -v "$TORCHRUN" >/dev/null 2>&1; then
        # shellcheck disable=SC2086
        a_sizes t torchrun "${A_T_RUNS:-1}" ${A_T_SIZES-16 64}
    fi
fi

# ------------------------------------------------------------------ (b) loadgen
if [[ " $PARTS " == *" b "* ]]; then
    for r in $(seq 1 "${B_RUNS:-3}"); do
        "$MUSTER_BIN" server --listen 127.0.0.1:0 2> "$W/srv.err" &
        spid=$!
        BG="$BG $spid"
        if ! wait_for 10 grep -q 'server listening on' "$W/srv.err"; then
            summ "(b) muster server did not start: $(head -2 "$W/srv.err")"
            kill_all
            break
        fi
        sp=$(sed -n 's/.*server listening on .*:\([0-9][0-9]*\).*/\1/p' "$W/srv.err" | head -1)
        out=$("$LOADGEN" -e 127.0.0.1:$sp -n "${B_AGENTS:-10000}" -j "${B_JOBS:-1}" -t "${B_TIMEOUT:-300}" -p $spid 2>&1)
        summ "(b) run $r: $out"
        kill -TERM $spid; wait $spid 2>/dev/null
        BG=""
    done
fi

# ------------------------------------------------------------------ (c) lost agent
c_once() {  # c_once m|t -> ns from kill -9 of one agent to the last survivor worker's stop
    local who=$1 n=${C_AGENTS:-8} lg=$W/c.$RANDOM port pids="" victim t_kill i
    [ "$who" = t ] && n=4
    port=$(free_port)
    : > "$lg"
    for i in $(seq 1 "$n"); do
        if [ "$who" = m ]; then
            env -u PYTHON_EXEC "$MUSTER_BIN" run --nnodes 2:$n --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$port \
                --rdzv-id rc$port --rdzv-conf join_timeout=60,last_call_timeout=5 --max-restarts 3 \
                --no-python "$STAMP" hold "$lg" > /dev/null 2>&1 &
        else
            # shellcheck disable=SC2086
            "$TORCHRUN" --nnodes 2:$n --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$port \
                --rdzv_id rc$port --max_restarts 3 $TORCHRUN_FIX --monitor_interval 0.1 \
                --no_python "$STAMP" hold "$lg" > /dev/null 2>&1 &
        fi
        pids="$pids $!"
        BG="$BG $!"
        [ "$i" = 1 ] && sleep 0.3
    done
    if ! wait_for 120 bash -c "[ \$(grep -c ^start '$lg') -ge $n ]"; then
        echo "fail(start)"; kill_all; return
    fi
    sleep 0.5
    victim=$(awk '{print $NF}' <<< "$pids")  # the last agent (not the host of the endpoint)
    t_kill=$(now)
    kill -9 "$victim"
    wait_for "${C_WAIT:-10}" bash -c "[ \$(awk -v v=$victim '\$1 == \"stop\" && \$4 != v' '$lg' | wc -l) -ge $((n - 1)) ]"
    awk -v v="$victim" -v t="$t_kill" -v n="$n" -v w="${C_WAIT:-10}" '$1 == "stop" && $4 != v {c++; if ($3 > m) m = $3}
        END {if (c < n - 1) print "not-noticed(" c + 0 "/" n - 1 "-survivors-stopped-within-" w "s)"; else printf "%.0f\n", m - t}' "$lg"
    kill_all
}
if [[ " $PARTS " == *" c "* ]]; then
    s=""
    for r in $(seq 1 "${C_RUNS:-5}"); do v=$(c_once m); s="$s $v"; log "(c) muster run $r: $v"; done
    summ "(c) muster   lost agent -> survivors stopped: median $(ms "$(tr ' ' '\n' <<< "$s" | grep -E '^[0-9]+$' | median)") ms; raw ns:$s"
    if [ "${C_TORCHRUN:-1}" = 1 ] && command -v "$TORCHRUN" >/dev/null 2>&1; then
        v=$(c_once t)
        summ "(c) torchrun lost agent (4 agents) -> survivors stopped: $v"
    fi
fi

# ------------------------------------------------------------------ (d) host cut (netns)
if [[ " $PARTS " == *" d "* ]]; then
    T=$W
    MARK=""
    IT_BG_PIDS=""
    IT_CLEANUP_HOOKS=""  # netns.sh registers ns_teardown here; bench_cleanup() calls it
    # shellcheck source=../tests/integration/netns.sh
    . "$SRC/tests/integration/netns.sh"
    reason=$(ns_available) || { summ "(d) skipped: $reason"; PARTS=""; }
    if [ -n "$PARTS" ]; then
        ns_setup 4
        HB=${D_HB:-2}
        s=""
        for r in $(seq 1 "${D_RUNS:-3}"); do
            lg=$W/d.$r
            : > "$lg"
            ns_bg 4 dsrv -- "$MUSTER_BIN" server --listen "${HOST_ADDR[4]}:29400"
            srv=$MPID
            if ! wait_for 10 grep -q 'server listening on' "$W/dsrv.err"; then
                summ "(d) muster server did not start: $(head -2 "$W/dsrv.err")"
                break
            fi
            for k in 1 2 3; do
                ns_bg $k d$k -- "$MUSTER_BIN" run --nnodes 2:3 --nproc-per-node 1 \
                    --rdzv-endpoint "${HOST_ADDR[4]}:29400" --rdzv-id rd$r \
                    --rdzv-conf join_timeout=30,last_call_timeout=5,heartbeat_timeout=$HB,keep_alive_interval=0.5 \
                    --max-restarts 3 --no-python "$STAMP" hold "$lg"
                eval "dp$k=\$MPID"
            done
            if ! wait_for 30 bash -c "[ \$(grep -c ^start '$lg') -ge 3 ]"; then
                s="$s fail(start)"
            else
                sleep 1.2
                t_cut=$(now)
                ns_cut 3
                # shellcheck disable=SC2154
                wait_for $((HB + 10)) bash -c "[ \$(awk -v v=$dp3 '\$1 == \"stop\" && \$4 != v' '$lg' | wc -l) -ge 2 ]"
                v=$(awk -v v="$dp3" -v t="$t_cut" '$1 == "stop" && $4 != v {c++; if ($3 > m) m = $3}
                    END {if (c < 2) print "not-detected-in-" '"$((HB + 10))"' "s"; else printf "%.0f\n", m - t}' "$lg")
                s="$s $v"
                log "(d) run $r: $v"
                ns_restore 3
            fi
            for p in "${NS_BGPID[@]}"; do kill -9 "$p" 2>/dev/null; done
            for p in "${NS_BGPID[@]}"; do wait "$p" 2>/dev/null; done
            NS_BGPID=()
        done
        summ "(d) muster   host cut -> survivors stopped (heartbeat_timeout $HB s, target <= $((HB * 1000 + 500)) ms): median $(ms "$(tr ' ' '\n' <<< "$s" | grep -E '^[0-9]+$' | median)") ms; raw ns:$s"
    fi
fi

# ------------------------------------------------------------------ (e) idle + slowloris pressure
if [[ " $PARTS " == *" e "* ]]; then
    declare -A ES
    for r in $(seq 1 "${E_RUNS:-5}"); do
        for mode in none ${E_MODES-tls pre}; do
            v=$(A_SETTLE=${E_SETTLE:-3} a_once m 16 "$mode"); ES[$mode]="${ES[$mode]:-} $v"
            log "(e) 16 agents, pressure $mode, run $r: $v ns"
        done
    done
    base=$(tr ' ' '\n' <<< "${ES[none]}" | grep -E '^[0-9]+$' | median)
    summ "(e) 16 agents, no pressure: median $(ms "$base") ms; raw ns:${ES[none]}"
    for mode in ${E_MODES-tls pre}; do
        m=$(tr ' ' '\n' <<< "${ES[$mode]}" | grep -E '^[0-9]+$' | median)
        summ "(e) 16 agents, ${E_IDLE:-1000} idle ($mode) + 1 slowloris: median $(ms "$m") ms, ratio $(awk -v a="$m" -v b="$base" 'BEGIN {if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b}') (goal <= 1.10); raw ns:${ES[$mode]}"
    done
    [ -f "$W/press.log" ] && log "(e) pressure at the last agent's start: $(tr '\n' ';' < "$W/press.log")"
    [ -f "$W/press.log" ] && summ "(e) pressure state at each measurement: $(tr '\n' ';' < "$W/press.log")"
fi

echo "=== rdzv_bench summary ($(date -u '+%F %H:%M UTC'), $(nproc) cores, muster $MUSTER_BIN) ==="
printf '%s' "$SUMMARY"
