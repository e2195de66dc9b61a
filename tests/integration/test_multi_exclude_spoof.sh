#!/bin/bash
# a teammate (holding the job's credential, but not a node's secret) cannot get
# a healthy node excluded by JOINing with that node's host and address and failing once. The
# failure ledger is keyed by the address the server SAW (the TCP peer), not by what a JOIN
# claims: rdzv_poke connects from 127.0.0.3 (another "machine" on loopback), claims victim a's
# host and --local-addr, and fails round 0. Under --exclude-after 1 only the spoofer's own entry
# is excluded; a and b restart, finish with their workers' exit code (0), and /status charges
# the failure to the seen address 127.0.0.3.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_tool POKE RDZV_POKE rdzv_poke
need_cmd curl "for /status"

start_token_server
JOB=spoof-$$
job_token "$T/job.tok" --job "$JOB"

# last_call 4 s: room for the spoofer to join round 0 after a and b (3 = max closes it at once)
common=(--nnodes 2:3 --nproc-per-node 1 --rdzv-endpoint "$EP" --rdzv-id "$JOB" --token-file "$T/job.tok"
        --rdzv-conf join_timeout=30,last_call_timeout=4 --max-restarts 3 --exclude-after 1)
work=(--no-python /bin/bash -c 'sleep 4; exit 0')
agent a -u MUSTER_TOKEN -- "${common[@]}" --local-addr 127.0.0.1 "${work[@]}"
agent b -u MUSTER_TOKEN -- "${common[@]}" --local-addr 127.0.0.2 "${work[@]}"
joined2() {
    http_get "$SHTTP" /status && [ "$(grep -o '"node_id"' "$T/http.body" | wc -l)" -ge 2 ]
}
wait_for 20 joined2 || { show_all; fail "a and b did not join"; }

VICTIM_HOST=$(hostname)
out=$(MUSTER_TOKEN=$(cat "$T/job.tok") MUSTER_POKE_FROM=127.0.0.3 timeout 30 \
    "$POKE" "$EP" joinfail "$JOB" 2:3 "$VICTIM_HOST" 127.0.0.1 2>&1)
[ "$out" = "SENT FAILED" ] || { show_all; fail "spoofing JOIN + FAILED: got '$out'"; }

# while the job runs on: the failure is charged to the seen address 127.0.0.3 (the spoofer's own
# entry, excluded), never to the victim's 127.0.0.1
http_get "$SHTTP" /status
grep -q '"seen":"127.0.0.3","failures":1,"excluded":true' "$T/http.body" \
    || { cat "$T/http.body" >&2; fail "/status does not charge the seen address"; }
grep -q '"seen":"127.0.0.1"' "$T/http.body" && { cat "$T/http.body" >&2; fail "/status charged the victim"; }
out=$(MUSTER_TOKEN=$(cat "$T/job.tok") MUSTER_POKE_FROM=127.0.0.3 timeout 30 \
    "$POKE" "$EP" joinfail "$JOB" 2:3 "$VICTIM_HOST" 127.0.0.1 2>&1)
case "$out" in "ERROR 8 node "*" is excluded from job $JOB"*) ;; *) fail "the spoofer's re-JOIN: got '$out'" ;; esac

agent_wait a 40
expect_agent_rc a 0
agent_wait b 40
expect_agent_rc b 0
grep -q 'restarting workers (restart 1/3)' "$T/a.err" || { show_all; fail "a did not restart after the forged failure"; }
grep -q 'is excluded from job' "$T/a.err" "$T/b.err" && { show_all; fail "a healthy node was excluded"; }

stop_server
assert_no_marked_left "after the job" 5
exit 0
