#!/bin/bash
# A hot spare replaces a lost host: server in host 4, a fixed-size job (--nnodes 2,
# join_timeout 60 s) on hosts 1 and 2, a --spare agent in host 3. Host 2's link goes down and its
# agent and workers are killed (no FIN reaches the server: it notices by missed heartbeats,
# heartbeat_timeout 1 s). The survivor (host 1, group rank 0) keeps its rank, the spare takes
# host 2's group rank 1, and round 1 runs at world size 2 within heartbeat_timeout + 2 s of the
# cut (not after the join timeout); restart count 1; both finish and exit 0. Root only (77).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

ns_cut_job nsspare 1 60 0.25
run_on() { # K [--spare]
    ns_hold_agent $1 a$1 2 "${@:2}" --local-addr ${HOST_ADDR[$1]}
}
run_on 3 --spare
wait_for 20 grep -q "as a spare" "$T/a3.err" || { show_all; fail "the spare did not join"; }
run_on 1
wait_for 20 grep -q "rendezvous $JOB: 1/2 nodes" "$T/a1.err" || { show_all; fail "host 1 did not join first"; }
run_on 2
wait_for 30 files_at_least 2 "$T/w/ready.*.0" || { show_all; fail "round 0 did not start"; }
check_ranks "$T/w" 0 2 2
expect_eq "host of group rank 0" 1 "$(envval "$T/w/env.0.0" HOSTNO)"
expect_eq "host of group rank 1" 2 "$(envval "$T/w/env.1.0" HOSTNO)"
sleep 1 # a few heartbeats

t_cut=$(now_ms)
ns_cut 2
ns_kill_inside "${NS_HOST[2]}" # the host is gone: agent and workers with it
wait_for 20 files_at_least 2 "$T/w/ready.*.1" || { show_all; fail "round 1 did not start with the spare"; }
took=$(( $(now_ms) - t_cut ))
note "host 2 cut and killed -> round 1 running with the spare: $took ms (heartbeat_timeout $HB s)"
[ "$took" -le $((HB * 1000 + 2000)) ] || fail "round 1 took $took ms (heartbeat_timeout $HB s + 2 s allowed)"
check_ranks "$T/w" 1 2 2
expect_eq "host of group rank 0 in round 1" 1 "$(envval "$T/w/env.0.1" HOSTNO)"
expect_eq "host of group rank 1 in round 1 (host 2's)" 3 "$(envval "$T/w/env.1.1" HOSTNO)"
expect_lost_node 1/2 a1 # the spare was in no round: it got no RESTART
release_agents a1 a3
ls "$T/w" | grep -q '^ready\..*\.2$' && fail "a third round ran"
stop_server
