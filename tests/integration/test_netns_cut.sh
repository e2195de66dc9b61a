#!/bin/bash
# A host cut off the network: server in host 4, agents in hosts 1-3 (--nnodes 2:3,
# heartbeat_timeout=2, keep_alive_interval=0.5, last_call_timeout=0.5, 2 restarts), workers
# hold. Host 3's link goes down (no FIN, no RST): the server must notice by missed heartbeats;
# the survivors' workers are stopped within heartbeat_timeout + 1 s of the cut (the benchmark
# holds muster to + 0.5 s), the agents print "restarting workers (restart 1/2): ... lost node",
# and the job continues with the 2 remaining nodes (restart 1, WORLD_SIZE 2), which finish.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

ns_cut_job nscut 2 30 0.5
for k in 1 2 3; do
    ns_hold_agent $k a$k 2:3 --local-addr ${HOST_ADDR[$k]}
done
wait_for 30 files_at_least 3 "$T/w/ready.*.0" || { show_all; fail "3 workers of round 0 did not start"; }
check_ranks "$T/w" 0 3 3
sleep 1  # a few heartbeats
ns_cut_survivors 3 0 1 2
worst=$WORST_MS
note "host cut -> last survivor worker stopped: ${worst} ms (heartbeat_timeout ${HB} s)"
[ "$worst" -le $((HB * 1000 + 1000)) ] || fail "cut detected after ${worst} ms (heartbeat_timeout ${HB} s + 1 s allowed)"
wait_for 20 files_at_least 2 "$T/w/ready.*.1" || { show_all; fail "round 1 with the 2 remaining hosts did not start"; }
check_ranks "$T/w" 1 2 2
expect_lost_node 1/2 a1 a2
release_agents a1 a2
ns_restore 3
stop_server
