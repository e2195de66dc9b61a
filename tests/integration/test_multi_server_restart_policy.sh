#!/bin/bash
# A job rebuilt after a server restart keeps its restart policy: REJOIN carries JOIN's
# optional tail. Server + 2 agents with --restart-backoff 2:4 and --exclude-after 3:600, workers
# holding; kill -9 of the server, a new one on the same port; once the agents re-registered,
# /status of the new server shows exclude_after 3, and a worker killed afterwards makes a restart
# that the server holds for the backoff ("restarting in 1.6-2.4 s") instead of restarting at once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server
JOB=srvpol-$$
mkdir -p "$T/w"
for i in 1 2; do
    agent a$i -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
        --rdzv-conf join_timeout=30,reconnect_grace=30 --max-restarts 2 --restart-backoff 2:4 \
        --exclude-after 3:600 --no-python "$WORKER" hold "$T/w"
done
wait_for 30 files_at_least 2 "$T/w/ready.*.0" || { show_all; fail "round 0 did not start"; }

kill -9 "$SPID"
wait "$SPID" 2>/dev/null
sleep 1
SERVER_PORT=$SPORT SERVER_TAG=server2 start_server
reg() { http_get "$SHTTP" /status && grep -q "\"id\":\"$JOB\",\"state\":\"running\"" "$T/http.body"; }
wait_for 20 reg || { show_all; cat "$T/http.body" >&2; fail "the job is not running on the restarted server"; }
grep -q '"exclude_after":3' "$T/http.body" || { cat "$T/http.body" >&2; fail "the rebuilt job lost --exclude-after"; }

read -r _ _ pid < <(grep '^0 0 ' "$T/w/starts")
kill -9 "$pid" # rank 0's worker dies: a failure of the rebuilt job
wait_for 20 grep -q 'restarting in ' "$T/a1.err" || { show_all; fail "no backoff after the server restart"; }
grep -qE 'restarting in (1\.[6-9]|2\.[0-4]) s \(attempt 2 of 3\)' "$T/a1.err" \
    || { show_all; fail "the restart after the server restart was not held for MIN (2 s +-20 %)"; }
wait_for 20 files_at_least 2 "$T/w/ready.*.1" || { show_all; fail "round 1 did not start"; }
release_agents a1 a2
stop_server
assert_no_marked_left "after the job" 5
