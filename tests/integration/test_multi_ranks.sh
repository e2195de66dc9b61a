#!/bin/bash
# `muster server` + 3 agents on loopback with --nproc-per-node 1, 2 and 3 (started in a
# shuffled order): every rank 0..5 exists once, each node's ranks are contiguous from the prefix
# sum of the lower nodes' worker counts, every worker has the same MASTER_ADDR/MASTER_PORT,
# WORLD_SIZE, GROUP_WORLD_SIZE and TORCHELASTIC_RESTART_COUNT, and muster's own variables.
# While waiting the agents print "muster: rendezvous JOB: k/3 nodes".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server
JOB=ranks-$$
mkdir -p "$T/w"
for i in 2 3 1; do
    agent a$i -- --nnodes 3 --nproc-per-node $i --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB --rdzv-conf join_timeout=30 \
        --no-python "$WORKER" dump "$T/w"
    # the first agents wait: their progress line shows the count
    [ $i = 2 ] && { wait_for 10 grep -q "rendezvous $JOB: 1/3 nodes" "$T/a2.err" \
        || { show_all; fail "no 'rendezvous $JOB: 1/3 nodes' progress line from the first agent"; }; }
done
agents_exit 60 0 a1 a2 a3
check_ranks "$T/w" 0 6 3
f=$T/w/env.0.0
expect_eq "TORCHELASTIC_RUN_ID" "$JOB" "$(envval "$f" TORCHELASTIC_RUN_ID)"
expect_eq "MUSTER_JOB_ID" "$JOB" "$(envval "$f" MUSTER_JOB_ID)"
expect_eq "MUSTER_ENDPOINT" "127.0.0.1:$SPORT" "$(envval "$f" MUSTER_ENDPOINT)"
expect_eq "MUSTER_ROUND" "0" "$(envval "$f" MUSTER_ROUND)"
envval "$f" MUSTER_TOKEN >/dev/null || fail "MUSTER_TOKEN not in the worker environment"
# group rank 0 connected from 127.0.0.1 without --local-addr: MASTER_ADDR is that address
expect_eq "MASTER_ADDR" "127.0.0.1" "$(envval "$f" MASTER_ADDR)"
stop_server
assert_no_marked_left "after the job" 5
