#!/bin/bash
# a JOIN whose host is not valid UTF-8 used to reach /metrics labels (Prometheus
# then refuses the whole scrape, for every team) and /status (the node vanished: jansson refuses
# the string). Now the codec refuses it as a malformed JOIN (counted in
# muster_protocol_errors_total), /metrics stays valid UTF-8 with every line in the exposition
# format, /status stays valid JSON, and another job runs on to its own exit code.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_tool POKE RDZV_POKE rdzv_poke
need_cmd curl "for /status and /metrics"
need_cmd jq "to check /status"

start_server
[ -n "$SHTTP" ] || fail "the server printed no http address"
EP=127.0.0.1:$SPORT
A=utf8a-$$
agent a -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint "$EP" --rdzv-id "$A" \
    --rdzv-conf join_timeout=30 --no-python /bin/bash -c 'sleep 4; exit 0'
running() { http_get "$SHTTP" /status && grep -q "\"$A\"" "$T/http.body"; }
wait_for 20 running || { show_all; fail "job A did not start"; }

out=$(timeout 30 "$POKE" "$EP" badhost "utf8b-$$" 1 2>&1)
case "$out" in "ERROR 1 malformed JOIN payload"*) ;; *) show_all; fail "non-UTF-8 host: got '$out'" ;; esac
out=$(timeout 30 "$POKE" "$EP" badhost "$A" 1 2>&1)
case "$out" in "ERROR 1 malformed JOIN payload"*) ;; *) show_all; fail "non-UTF-8 host in job A: got '$out'" ;; esac

http_get "$SHTTP" /metrics
[ "$HTTP_CODE" = 200 ] || fail "/metrics answered $HTTP_CODE"
iconv -f UTF-8 -t UTF-8 "$T/http.body" >/dev/null || fail "/metrics is not valid UTF-8"
# the text exposition format: comments, or NAME{LABELS} VALUE with quoted, escaped label values
bad=$(grep -avE '^(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*|[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? [-+0-9.eEInfNa]+)$' "$T/http.body")
[ -z "$bad" ] || fail "/metrics lines outside the exposition format: $bad"
n=$(sed -n 's/^muster_protocol_errors_total{reason="protocol"} \([0-9]*\)$/\1/p' "$T/http.body")
[ "${n:-0}" -ge 2 ] || fail "the refused JOINs are not counted: $(grep protocol_errors "$T/http.body")"
grep -q 'bad-' "$T/http.body" && fail "/metrics shows the refused host"

http_get "$SHTTP" /status
jq -e --arg a "$A" '.jobs[] | select(.id == $a)' "$T/http.body" >/dev/null \
    || { cat "$T/http.body" >&2; fail "/status is not valid JSON or lost job A"; }

agent_wait a 40
expect_agent_rc a 0
stop_server
assert_no_marked_left "after the job" 5
exit 0
