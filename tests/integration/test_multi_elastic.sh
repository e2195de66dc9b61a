#!/bin/bash
# Elastic --nnodes 2:3 with a short last call: only two agents come, the round closes with two
# once the last call (1 s) is over, and the job finishes with WORLD_SIZE = 2 + 1 = 3. The
# progress line announces the last call.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_job elastic
agent a1 -- --nnodes 2:3 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
    --rdzv-conf join_timeout=30,last_call_timeout=1 --no-python "$WORKER" dump "$T/w"
agent a2 -- --nnodes 2:3 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
    --rdzv-conf join_timeout=30,last_call_timeout=1 --no-python "$WORKER" dump "$T/w"
agent_wait a1 30
expect_agent_rc a1 0
agent_wait a2 30
expect_agent_rc a2 0
el=$(( $(now_ms) - t0 ))
check_ranks "$T/w" 0 3 2
grep -q "rendezvous $JOB: 2/3 nodes, last call in" "$T/a1.err" "$T/a2.err" \
    || { show_all; fail "no 'rendezvous $JOB: 2/3 nodes, last call in N s' progress line"; }
# the round must not wait for the join timeout (30 s); last call is 1 s
[ "$el" -lt 15000 ] || fail "the 2-of-3 job took ${el} ms (last_call_timeout=1 s)"
stop_server
assert_no_marked_left "after the job" 5
