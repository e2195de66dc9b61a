#!/bin/bash
# --nnodes 2 but only one agent comes: with join_timeout=2 the agent gives up with exit code 3
# and a message that says how many nodes came (1 of 2). Its worker never starts.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_job jt
agent a1 -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
    --rdzv-conf join_timeout=2 --no-python "$WORKER" dump "$T/w"
agent_wait a1 30
el=$(( $(now_ms) - t0 ))
expect_agent_rc a1 3
grep -Eiq '1 of 2|1/2' "$T/a1.err" || { show_agent a1; fail "the timeout message does not say 1 of 2 nodes came"; }
grep -qi 'timed out\|timeout' "$T/a1.err" || { show_agent a1; fail "the message does not say it timed out"; }
[ "$el" -ge 1500 ] || fail "gave up after ${el} ms, before join_timeout=2 s"
[ "$el" -lt 15000 ] || fail "gave up only after ${el} ms (join_timeout=2 s)"
[ -z "$(ls "$T/w")" ] || fail "a worker started although the rendezvous failed: $(ls "$T/w")"
# the server survives a timed-out job
kill -0 "$SPID" 2>/dev/null || fail "the server exited after the job timed out"

# the same with an agent-hosted endpoint (no separate server)
P=$(free_port)
agent b1 -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$P --rdzv-id $JOB-b \
    --rdzv-conf join_timeout=2 --no-python "$WORKER" dump "$T/w"
agent_wait b1 30
expect_agent_rc b1 3
grep -Eiq '1 of 2|1/2' "$T/b1.err" || { show_agent b1; fail "hosted: the timeout message does not say 1 of 2 nodes came"; }
stop_server
assert_no_marked_left "after the job" 5
