#!/bin/bash
# Coordinated restart rounds of a many-node job against the real server (issue 29): 300
# simulated TLS agents (build/bench/loadgen -R, bench/loadgen.c) in one job, each with a real
# agent's keep-alive (HEARTBEAT every 250 ms here). Three times: once every agent holds its
# ASSIGN, one agent reports FAILED, every agent gets RESTART, sends its JOIN again on the
# connection it holds (same node id and secret) and must get a new ASSIGN with its old ranks
# (sticky: the same nodes came back), the same master, round + 1 and the restart count; loadgen
# exits 1 on any other ASSIGN, a RESTART with a wrong count, an ERROR or an unexpected message.
# Then DONE from every agent and JOB_DONE. The server must count exactly 3 restarts and 4
# rounds in /metrics, and lose no node (the heartbeats kept every agent alive). The same
# tool times the 10,000-agent rounds (bench/scale_bench.sh, tests/gpu/scale.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_cmd curl "for /metrics"
LG=${MUSTER_BUILD:-$MUSTER_SRC/build}/bench/loadgen
[ -x "$LG" ] || skip "loadgen not built ($LG: cmake --build build --target loadgen)"

start_server
timeout -k 5 90 "$LG" -e "127.0.0.1:$SPORT" -n 300 -R 3 -K 250 -P -t 60 \
    -p "$SPID" -i "rr$$" > "$T/lg.out" 2> "$T/lg.err"
rc=$?
[ "$rc" = 0 ] || fail "loadgen -R 3 exited $rc: $(tail -3 "$T/lg.err" "$T/lg.out")"
n=$(grep -c '^restart_round=[123] restart_round_ms=' "$T/lg.out")
[ "$n" = 3 ] || fail "expected 3 timed restart rounds, got $n: $(cat "$T/lg.out")"
grep -q ' restart_rounds=3 .*keep_alive_ms=250\| keep_alive_ms=250 .*restart_rounds=3 ' "$T/lg.out" ||
    fail "no summary line with 3 rounds and the keep-alive: $(tail -1 "$T/lg.out")"
hb=$(sed -n 's/.* heartbeats=\([0-9]*\) echoes=\([0-9]*\).*/\1 \2/p' "$T/lg.out")
read -r sent echoed <<< "$hb"
if [ -z "$sent" ] || [ "$sent" -le 0 ] || [ "$sent" != "$echoed" ]; then
    fail "heartbeats sent/echoed: '${hb}' (expected > 0, every one echoed)"
fi
note "$(grep -o 'restart_round_ms_median=[0-9.]*' "$T/lg.out"), $sent heartbeats"

http_get "$SHTTP" /metrics
[ "$HTTP_CODE" = 200 ] || fail "/metrics answered $HTTP_CODE"
metric() { awk -v k="$1" '$1 == k { print $2 }' "$T/http.body"; }
[ "$(metric muster_restarts_total)" = 3 ] ||
    fail "muster_restarts_total $(metric muster_restarts_total), expected 3"
[ "$(metric muster_rounds_total)" = 4 ] ||
    fail "muster_rounds_total $(metric muster_rounds_total), expected 4 (the first and 3 restarts)"
lost=$(metric muster_lost_nodes_total)
[ "${lost:-0}" = 0 ] || fail "muster_lost_nodes_total $lost: a node was lost"
exit 0
