#!/bin/bash
# Server restart: server + 2 agents, workers running (hold). kill -9 of the server, a new server
# on the same port 1 s later: the agents reconnect and re-register their round, the workers are
# not touched (same PIDs, no second start, no SIGTERM, no "restarting workers" line), and when
# the workers finish the job completes with exit 0 on both agents. `muster status` against the
# new server shows the re-registered job.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

SERVER_NO_HTTP=1 start_server
JOB=srvre-$$
mkdir -p "$T/w"
for i in 1 2; do
    agent a$i -- --nnodes 2 --nproc-per-node $i --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
        --rdzv-conf join_timeout=30,reconnect_grace=30 --max-restarts 2 \
        --no-python "$WORKER" hold "$T/w"
done
wait_for 30 files_at_least 3 "$T/w/ready.*.0" || { show_all; fail "3 workers did not start"; }
before=$(sort "$T/w/starts")

kill -9 "$SPID"
wait "$SPID" 2>/dev/null
sleep 1
SERVER_PORT=$SPORT SERVER_TAG=server2 SERVER_NO_HTTP=1 start_server
# give the agents time to reconnect (backoff) and re-register
reg() { OUTF=$T/st.out ERRF=$T/st.err mrun -- status --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB && [ "$RC" = 0 ] && grep -q "$JOB" "$T/st.out"; }
wait_for 20 reg || { show_all; cat "$T/st.out" "$T/st.err" >&2; fail "the job is not known to the restarted server within 20 s (muster status)"; }
sleep 0.5
for i in 1 2; do
    kill -0 "${APID[a$i]}" 2>/dev/null || { show_all; fail "agent a$i exited after the server restart"; }
done
expect_eq "worker starts after the server restart (same pids, no second start)" "$before" "$(sort "$T/w/starts")"
ls "$T/w" | grep -q '^stop\.' && fail "a worker got SIGTERM across the server restart: $(ls "$T/w" | grep '^stop\.')"
grep -q 'restarting workers' "$T/a1.err" "$T/a2.err" && { show_all; fail "an agent restarted its workers across the server restart"; }
while read -r r n pid; do
    kill -0 "$pid" 2>/dev/null || fail "worker rank $r (pid $pid) is gone after the server restart"
done < "$T/w/starts"

release_agents a1 a2
expect_eq "worker starts in total" 3 "$(wc -l < "$T/w/starts")"
stop_server
assert_no_marked_left "after the job" 5
