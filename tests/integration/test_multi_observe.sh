#!/bin/bash
# Observability of a running job: `muster status --rdzv-endpoint` (text and --json) lists the
# job with its nodes, ranks and restarts; the server's HTTP port answers GET /metrics
# (Prometheus text, muster_* metrics), /status (JSON naming the job) and / (HTML).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server
[ -n "$SHTTP" ] || fail "the server printed no 'http on HOST:PORT' line: $(cat "$SERR")"
JOB=obs-$$
mkdir -p "$T/w"
for i in 1 2; do
    agent a$i -- --nnodes 2 --nproc-per-node $i --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
        --rdzv-conf join_timeout=30 --no-python "$WORKER" hold "$T/w"
done
wait_for 30 files_at_least 3 "$T/w/ready.*.0" || { show_all; fail "3 workers did not start"; }

# muster status, text
OUTF=$T/st.out ERRF=$T/st.err IT_TIMEOUT=10 mrun -- status --rdzv-endpoint 127.0.0.1:$SPORT
[ "$RC" = 0 ] || { cat "$T/st.out" "$T/st.err" >&2; fail "muster status exited $RC"; }
grep -q "$JOB" "$T/st.out" || { cat "$T/st.out" >&2; fail "muster status does not list $JOB"; }
OUTF=$T/st1.out ERRF=$T/st1.err IT_TIMEOUT=10 mrun -- status --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB
[ "$RC" = 0 ] || { cat "$T/st1.out" "$T/st1.err" >&2; fail "muster status --rdzv-id exited $RC"; }
grep -q "$JOB" "$T/st1.out" || fail "muster status --rdzv-id $JOB does not name the job"
grep -qi 'restart' "$T/st1.out" || { cat "$T/st1.out" >&2; fail "muster status does not show restarts"; }
# status --json: valid JSON that names the job (jq when present)
OUTF=$T/stj.out ERRF=$T/stj.err IT_TIMEOUT=10 mrun -- status --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB --json
[ "$RC" = 0 ] || { cat "$T/stj.out" "$T/stj.err" >&2; fail "muster status --json exited $RC"; }
if command -v jq >/dev/null 2>&1; then
    jq -e . "$T/stj.out" >/dev/null || { cat "$T/stj.out" >&2; fail "muster status --json is not JSON"; }
fi
grep -q "$JOB" "$T/stj.out" || fail "muster status --json does not name the job"
# a job id nobody uses: no crash
OUTF=$T/st2.out ERRF=$T/st2.err IT_TIMEOUT=10 mrun -- status --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id nosuchjob-$$
[ "$RC" -lt 64 ] || fail "muster status for an unknown job exited $RC"
grep -q "$JOB" "$T/st2.out" && fail "muster status --rdzv-id nosuchjob shows $JOB"

# HTTP (curl)
command -v curl >/dev/null 2>&1 || fail "curl is needed for the HTTP checks"
http_get "$SHTTP" /metrics
body=$(cat "$T/http.body")
expect_eq "GET /metrics status" 200 "$HTTP_CODE"
grep -q '^muster_' <<< "$body" || { echo "$body" | head >&2; fail "/metrics has no muster_* sample"; }
grep -Ev '^(#.*|[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [-+0-9.eEInfa]+( [0-9]+)?|)$' <<< "$body" | head -3 > "$T/badm"
[ -s "$T/badm" ] && fail "/metrics has lines that are not Prometheus text: $(cat "$T/badm")"
grep '^muster_' <<< "$body" | grep -v '^muster_[a-z0-9_]*\({[^}]*}\)\? ' | head -1 > "$T/badm"
[ -s "$T/badm" ] && fail "bad metric line: $(cat "$T/badm")"
http_get "$SHTTP" /status
body=$(cat "$T/http.body")
expect_eq "GET /status status" 200 "$HTTP_CODE"
if command -v jq >/dev/null 2>&1; then
    jq -e . <<< "$body" >/dev/null || { echo "$body" | head -c 500 >&2; fail "/status is not JSON"; }
fi
grep -q "$JOB" <<< "$body" || fail "/status does not name $JOB"
http_get "$SHTTP" /
body=$(cat "$T/http.body")
expect_eq "GET / status" 200 "$HTTP_CODE"
grep -qi '<html' <<< "$body" || fail "/ is not an HTML page"
http_get "$SHTTP" /no-such-page >/dev/null
expect_eq "GET /no-such-page status" 404 "$HTTP_CODE"

release_agents a1 a2
stop_server
assert_no_marked_left "after the job" 5
