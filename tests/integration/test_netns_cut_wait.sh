#!/bin/bash
# A host cut off with a fixed --nnodes 3: the job cannot go on with 2 nodes, so after the
# heartbeat timeout the survivors stop their workers and wait ("rendezvous JOB: 2/3 nodes")
# instead of starting a 2-node round; a replacement agent (a second agent in host 1) fills the
# round and the job finishes with 3 nodes in restart 1.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

ns_cut_job nscutw 2 30 0.5
for k in 1 2 3; do
    ns_hold_agent $k a$k 3
done
wait_for 30 files_at_least 3 "$T/w/ready.*.0" || { show_all; fail "3 workers of round 0 did not start"; }
sleep 1
ns_cut_survivors 3 0 1 2
wait_for 10 grep -q "rendezvous $JOB: 2/3 nodes" "$T/a1.err" "$T/a2.err" \
    || { show_all; fail "the survivors do not show 'rendezvous $JOB: 2/3 nodes' while waiting"; }
sleep 2
ls "$T/w" | grep -q '^ready\..*\.1$' && fail "a round started with 2 of 3 fixed nodes: $(ls "$T/w" | grep ready)"
ns_hold_agent 1 a4 3
wait_for 20 files_at_least 3 "$T/w/ready.*.1" || { show_all; fail "the replacement did not complete round 1"; }
check_ranks "$T/w" 1 3 3
release_agents a1 a2 a4
ns_restore 3
stop_server
