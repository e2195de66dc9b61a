#!/bin/bash
# silent connections cannot lock real agents out. 130 x 128 silent TCP
# connections (not one TLS byte) from 130 addresses of distinct /24s of 127/8, opened again
# 500 ms after the server closes one, are held while the 5 agents of a real job join: they all
# join and the job runs to its exit code; the evictions are counted in /metrics. Then 128
# silent connections from the agents' own address (127.0.0.1, the "one NAT / login node" case):
# a second job's agents still join. The join times are printed (the goal is <= 2 s each; the
# assertion is a generous 45 s, the 2-core VM is shared).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

command -v curl >/dev/null 2>&1 || skip "curl is needed for /metrics"
# 16,640 connections need as many descriptors in the flooder (it raises its soft limit to the
# hard one) and 16,384 + 256 + 64 in the server (muster server does the same)
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 16800 ]; then
    prlimit --pid $$ --nofile=20000:20000 2>/dev/null && hard=$(ulimit -Hn)
    [ "$hard" != unlimited ] && [ "$hard" -lt 16800 ] &&
        skip "RLIMIT_NOFILE hard limit $hard < 16800: 16,640 silent connections do not fit (root could raise it)"
fi

start_server
[ -n "$SHTTP" ] || fail "no HTTP port: $(cat "$SERR")"

# flood ADDRS PER FIRST: starts the flooder, waits until every connection was answered
flood() {
    silent_flood -r 500 -t 100 127.0.0.1 "$SPORT" "$1" "$2" "$3"
    note "flood from $1 address(es) x $2: $(grep '^connected' "$T/flood.out")"
}

unflood() {
    kill "$FPID" 2>/dev/null
    wait "$FPID" 2>/dev/null
    note "flooder: $(tail -1 "$T/flood.out")"
}

# hits LIMIT: muster_limit_hits_total{limit="LIMIT"} now
hits() {
    http_get "$SHTTP" /metrics
    sed -n "s/^muster_limit_hits_total{limit=\"$1\"} //p" "$T/http.body"
}

# counted LIMIT: muster_limit_hits_total{limit="LIMIT"} > 0 (waits for a fresh /metrics: the
# server serves a snapshot up to 250 ms old); sets HITS
counted() {
    HITS=$(hits "$1")
    [ "${HITS:-0}" -gt 0 ]
}

# job NAME N: N agents of job NAME join together; each must exit 0 (the workers' own code)
# within 45 s. Prints each agent's join time: start to its worker's start (the round needs all
# N, so this is the time until the last of them joined, plus the worker's spawn).
job() {
    local name=$1 n=$2 i t0 times=""
    JOB=$name-$$
    mkdir -p "$T/$name"
    t0=$(now_ms)
    for i in $(seq 1 "$n"); do
        agent "$name$i" -- --nnodes "$n" --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$SPORT" \
            --rdzv-id "$JOB" --rdzv-conf join_timeout=60 --no-python "$WORKER" dump "$T/$name"
    done
    wait_for 45 files_at_least "$n" "$T/$name/env.*.0" ||
        { show_all; fail "$name: not all $n agents joined within 45 s under the flood"; }
    for f in "$T/$name"/env.*.0; do
        times="$times $(( $(date -r "$f" +%s%3N) - t0 ))"
    done
    note "$name: $n agents joined; ms from start to each worker:$times"
    agents_exit 45 0 $(for i in $(seq 1 "$n"); do echo "$name$i"; done)
}

flood 130 128 127.100.0.2
wait_for 20 counted preauth_evicted ||
    { head -50 "$T/http.body" >&2; fail "no preauth_evicted counted after 16,640 silent connections"; }
job many 5
unflood
note "/metrics: preauth_evicted $(hits preauth_evicted), first_byte_timeout $(hits first_byte_timeout)," \
    "preauth_source_evicted $(hits preauth_source_evicted), connections $(hits connections)," \
    "handshakes_in_flight $(hits handshakes_in_flight)"
grep -q 'preauth_evicted' "$SERR" || fail "the server did not log the evictions: $(tail -5 "$SERR")"

flood 1 128 127.0.0.1
job own 5
wait_for 5 counted preauth_source_evicted ||
    fail "no preauth_source_evicted counted for the agents' own address"
unflood
note "/metrics: preauth_source_evicted $HITS, handshakes_in_flight $(hits handshakes_in_flight)"
grep -q 'refused 127.0.0.1: handshakes_in_flight' "$SERR" &&
    fail "an agent's connection from the flooded address was refused: $(grep handshakes_in_flight "$SERR")"
stop_server
assert_no_marked_left "after the jobs" 5
