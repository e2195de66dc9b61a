#!/bin/bash
# Lost agent: server + 3 agents (--nnodes 2:3, nproc 2/1/1, max 3 restarts), workers hold.
# kill -9 of agent a3 closes its connection: the server notices at once, the survivors stop
# their workers (each worker stamps its SIGTERM time) — asserted < 1 s after the kill here
# (generous; bench/rdzv_bench.sh measures the real figure) — and re-join; the job goes on
# with 2 nodes (WORLD_SIZE 3) in restart 1, announced as "restarting workers (restart 1/3):
# ... lost node ...". Then the workers are released and both survivors exit 0.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server
JOB=lost-$$
mkdir -p "$T/w"
conf=join_timeout=30,last_call_timeout=0.5
for i in 1 2 3; do
    np=1
    [ $i = 1 ] && np=2
    agent a$i AGENT_NAME=a$i -- --nnodes 2:3 --nproc-per-node $np --rdzv-endpoint 127.0.0.1:$SPORT \
        --rdzv-id $JOB --rdzv-conf $conf --max-restarts 3 --no-python "$WORKER" hold "$T/w"
done
wait_for 30 files_at_least 4 "$T/w/ready.*.0" || { show_all; fail "4 workers of round 0 did not start"; }
check_ranks "$T/w" 0 4 3

# which ranks live under which agent
surv=""
for r in 0 1 2 3; do
    a=$(envval "$T/w/env.$r.0" AGENT_NAME)
    [ "$a" != a3 ] && surv="$surv $r"
done
expect_eq "survivor ranks" 3 "$(echo $surv | wc -w)"

t_kill=$(date +%s%N)
kill -9 "${APID[a3]}"
survivors_stopped "$t_kill" 10 "of the kill" $surv
worst=$WORST_MS
note "kill -9 of an agent -> last survivor worker stopped: ${worst} ms"
[ "$worst" -lt 1000 ] || fail "survivors' workers were stopped ${worst} ms after the kill (limit 1000 ms)"

wait_for 20 files_at_least 3 "$T/w/ready.*.1" || { show_all; fail "round 1 (2 nodes, 3 workers) did not start"; }
t_re=$(( $(date +%s%N) / 1000000 - t_kill / 1000000 ))
note "kill -> 3 workers of restart 1 ready: ${t_re} ms (includes last_call_timeout 0.5 s)"
check_ranks "$T/w" 1 3 2
expect_lost_node 1/3 a1 a2
release_agents a1 a2
stop_server
assert_no_marked_left "after the job" 5
