#!/bin/bash
# the HTTP port cannot exhaust the server. 8,192 silent HTTP connections (64
# addresses x 128, opened again 500 ms after the server closes one) are held while a 3-agent
# job joins and runs to its exit code, and /metrics still answers; the evictions are counted
# (muster_limit_hits_total{limit="http_connections"}). /status is refused without the observer
# credential (401, counted), served with `Authorization: Bearer <muster token --read-only>`,
# and served to anyone by a server started with --http-public-status.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

command -v curl >/dev/null 2>&1 || skip "curl is needed"
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge 8400 ] ||
    skip "RLIMIT_NOFILE hard limit $hard < 8400: 8,192 silent connections do not fit"

SERVER_HTTP_PRIVATE=1 start_server
[ -n "$SHTTP" ] || fail "no HTTP port: $(cat "$SERR")"
hport=${SHTTP##*:}

silent_flood -r 500 -t 100 127.0.0.1 "$hport" 64 128 127.101.0.2 # 8,192 connections
note "HTTP flood: $(grep '^connected' "$T/flood.out")"

# counted LIMIT: muster_limit_hits_total{limit="LIMIT"} > 0 in a fresh /metrics; sets HITS
counted() {
    http_get "$SHTTP" /metrics
    [ "$HTTP_CODE" = 200 ] || return 1
    HITS=$(sed -n "s/^muster_limit_hits_total{limit=\"$1\"} //p" "$T/http.body")
    [ "${HITS:-0}" -gt 0 ]
}
t0=$(now_ms)
wait_for 20 counted http_connections || fail "/metrics did not answer with http_connections > 0 under the flood (HTTP $HTTP_CODE, curl exit $HTTP_CURL_RC)"
note "/metrics answered under the flood in $(( $(now_ms) - t0 )) ms; http_connections $HITS"
grep -q '^muster_http_connections_limit 256$' "$T/http.body" || fail "no muster_http_connections_limit 256 in /metrics"
# /metrics holds counts only: no host name nor address of anyone
grep -q '127\.' "$T/http.body" && fail "/metrics shows an address: $(grep '127\.' "$T/http.body" | head -3)"

JOB=hf-$$
mkdir -p "$T/w"
t0=$(now_ms)
for i in 1 2 3; do
    agent a$i -- --nnodes 3 --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$SPORT" --rdzv-id "$JOB" \
        --rdzv-conf join_timeout=60 --no-python "$WORKER" dump "$T/w"
done
agents_exit 45 0 a1 a2 a3
note "3 agents joined and exited 0 in $(( $(now_ms) - t0 )) ms under the HTTP flood"
kill "$FPID" 2>/dev/null
wait "$FPID" 2>/dev/null
note "flooder: $(tail -1 "$T/flood.out")"

# /status: 401 without a credential, 200 with the observer credential or the server's secret
http_get "$SHTTP" /status
expect_eq "GET /status without a credential" 401 "$HTTP_CODE"
grep -q 'muster token --read-only' "$T/http.body" || fail "the 401 gives no hint: $(cat "$T/http.body")"
IT_TIMEOUT=10 mrun -- token --read-only --out "$T/obs.tok"
[ "$RC" = 0 ] || fail "muster token --read-only exited $RC: $(cat "$T/err")"
code=$(curl -s -m 5 -o "$T/st.body" -w '%{http_code}' -H "Authorization: Bearer $(cat "$T/obs.tok")" "http://$SHTTP/status")
expect_eq "GET /status with the observer credential" 200 "$code"
grep -q '"jobs"' "$T/st.body" || fail "/status with the credential is no status document: $(head -c 300 "$T/st.body")"
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer wrong-$(cat "$T/obs.tok")" "http://$SHTTP/status")
expect_eq "GET /status with a wrong credential" 401 "$code"
wait_for 5 counted http_status_unauthorized || fail "the refused /status requests are not counted"
stop_server

SERVER_TAG=server2 start_server -- --http-public-status
http_get "$SHTTP" /status
expect_eq "GET /status of a server with --http-public-status" 200 "$HTTP_CODE"
stop_server
assert_no_marked_left "after the job" 5
