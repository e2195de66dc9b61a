#!/bin/bash
# Handshake flood benchmark (not a test: it prints figures, docs/BENCHMARKS.md).
#
#   bench/flood_bench.sh [BUILD_DIR]      (default BUILD_DIR: build; MUSTER_BIN overrides)
#
# One `muster server` on 127.0.0.1 (token file, HTTP for /metrics). Measures:
#   (1) RUNS new 2-node rendezvous (two `muster run --nnodes 2 --token-file ... /bin/true`
#       started together, wall time until both exited 0) without pressure;
#   (2) the same while tests/peers/flood keeps FLOOD_CONNS (200) unauthenticated connections churning
#       ClientHellos (X25519 and secp521r1-only, alternating) from FLOOD_SRC (127.0.1.2: another /24 than the agents);
#       goal: every rendezvous <= 2 s;
#   (3) the server's CPU per flood hello over FLOOD_SECS (5) of flood alone: once with the
#       default per-source limits (most hellos refused at accept), once with the limits lifted
#       (SERVER_ARGS_NOLIMIT: every hello gets a ServerHello and, for X25519, a key).
# SERVER_ARGS adds flags to the server of (1) and (2). A server without the flags of (3)
# (an older build) is measured with NOLIMIT=0.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${1:-$SRC/build}
MUSTER_BIN=${MUSTER_BIN:-$BUILD_DIR/muster}
RUNS=${RUNS:-5}
FLOOD_CONNS=${FLOOD_CONNS:-200}
FLOOD_SRC=${FLOOD_SRC:-127.0.1.2}
FLOOD_SECS=${FLOOD_SECS:-5}
NOLIMIT=${NOLIMIT:-1}
. "$SRC/bench/lib.sh"
bench_init flood_bench

FLOOD=$(bench_tool flood) || exit 1
[ -x "$MUSTER_BIN" ] || { log "no muster binary at $MUSTER_BIN"; exit 2; }
HZ=$(getconf CLK_TCK)

# start_server TAG [FLAGS...]: sets SPID, SPORT, SHTTP
start_server() {
    local tag=$1 i
    shift
    "$MUSTER_BIN" server --listen 127.0.0.1:0 --http 127.0.0.1:0 --token-file "$W/token" "$@" \
        2> "$W/$tag.err" &
    SPID=$!
    BG="$BG $SPID"
    for i in $(seq 200); do
        grep -q "http on" "$W/$tag.err" 2>/dev/null && break
        sleep 0.05
    done
    SPORT=$(sed -n 's/.*server listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$W/$tag.err")
    SHTTP=$(sed -n 's/.*http on 127.0.0.1:\([0-9]*\).*/\1/p' "$W/$tag.err")
    [ -n "$SPORT" ] || { log "server did not start: $(cat "$W/$tag.err")"; exit 1; }
}
stop_server() {
    kill "$SPID" 2>/dev/null
    wait "$SPID" 2>/dev/null
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SPID/stat"; }
metric() { # metric NAME_WITH_LABELS
    curl -s --max-time 5 "http://127.0.0.1:$SHTTP/metrics" 2>/dev/null |
        awk -v m="$1" '$1 == m {print $2}'
}

# one 2-node rendezvous: prints "ms rc1 rc2"
rendezvous() {
    local id=fb$$-$1 t0 t1 p1 p2 r1 r2
    t0=$(date +%s%N)
    "$MUSTER_BIN" run --nnodes 2 --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$SPORT" \
        --rdzv-id "$id" --token-file "$W/token" --no-python /bin/true > "$W/a1.out" 2>&1 &
    p1=$!
    "$MUSTER_BIN" run --nnodes 2 --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$SPORT" \
        --rdzv-id "$id" --token-file "$W/token" --no-python /bin/true > "$W/a2.out" 2>&1 &
    p2=$!
    wait $p1
    r1=$?
    wait $p2
    r2=$?
    t1=$(date +%s%N)
    [ $r1 = 0 ] && [ $r2 = 0 ] || log "rendezvous $id failed: $r1 $r2: $(tail -qn 2 "$W/a1.out" "$W/a2.out" | tr '\n' ' ')"
    echo "$(( (t1 - t0) / 1000000 )) $r1 $r2"
}
series() { # series TAG LABEL: RUNS rendezvous (ids fb<pid>-TAG<n>), one line
    local i out ms=() bad=0
    for i in $(seq "$RUNS"); do
        out=$(rendezvous "$1$i")
        ms+=("${out%% *}")
        [ "${out#* }" = "0 0" ] || bad=$((bad + 1))
    done
    log "$2: rendezvous ms: ${ms[*]} (failed: $bad of $RUNS); max $(printf '%s\n' "${ms[@]}" | sort -n | tail -1) ms"
}

touch "$W/token" && rm -f "$W/token" # the server writes a new one (0600)
start_server main ${SERVER_ARGS:-}
series quiet "no flood"
"$FLOOD" -e "127.0.0.1:$SPORT" -s "$FLOOD_SRC" -n "$FLOOD_CONNS" -t 0 > "$W/flood.out" 2>&1 &
FPID=$!
BG="$BG $FPID"
sleep 2
series flood "flood of $FLOOD_CONNS from $FLOOD_SRC"
kill -INT $FPID
wait $FPID 2>/dev/null
log "flood: $(cat "$W/flood.out")"
log "metrics: handshake_rate=$(metric 'muster_limit_hits_total{limit="handshake_rate"}') handshakes_in_flight=$(metric 'muster_limit_hits_total{limit="handshakes_in_flight"}') tls_handshake=$(metric 'muster_auth_failures_total{reason="tls_handshake"}')"
stop_server

# (3) server CPU per flood hello, flood alone
cpu_per_hello() { # cpu_per_hello TAG [SERVER FLAGS...]
    local tag=$1 c0 c1 opened
    shift
    start_server "$tag" "$@"
    c0=$(cpu_ticks)
    "$FLOOD" -e "127.0.0.1:$SPORT" -s "$FLOOD_SRC" -n "$FLOOD_CONNS" -t "$FLOOD_SECS" \
        -c "${FLOOD_CURVE:-mix}" > "$W/$tag.flood" 2>&1
    c1=$(cpu_ticks)
    opened=$(sed -n 's/.*opened=\([0-9]*\).*/\1/p' "$W/$tag.flood")
    log "$tag: $(cat "$W/$tag.flood"); server CPU $(awk -v a="$c0" -v b="$c1" -v hz="$HZ" 'BEGIN {printf "%.2f", (b - a) / hz}') s = $(awk -v a="$c0" -v b="$c1" -v hz="$HZ" -v n="$opened" 'BEGIN {if (n > 0) printf "%.1f", (b - a) / hz * 1e6 / n; else print "n/a"}') us per hello"
    stop_server
}
cpu_per_hello "cpu, default limits"
if [ "$NOLIMIT" = 1 ]; then
    for c in x25519 p521; do
        FLOOD_CURVE=$c cpu_per_hello "cpu, limits lifted, $c" --handshakes-per-source 1000000000 \
            --handshake-rate 1000000000 --handshake-burst 1000000000
    done
else
    for c in x25519 p521; do
        FLOOD_CURVE=$c cpu_per_hello "cpu, $c"
    done
fi
