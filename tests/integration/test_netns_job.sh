#!/bin/bash
# Three "hosts" (network namespaces on one bridge), one agent per host, nproc 1/2/1. The
# endpoint is host 1's address: its agent hosts the rendezvous, the others connect over the
# bridge. Each agent gives --local-addr; MASTER_ADDR is the address of the host whose agent got
# group rank 0, and the ranks are consistent. Then the same with `muster server` in a 4th host
# and no --local-addr: MASTER_ADDR is the address group rank 0's connection came from.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

ns_job nsjob 4
for k in 1 2 3; do
    np=1
    [ $k = 2 ] && np=2
    ns_bg $k a$k HOSTNO=$k -- "$MUSTER_BIN" run --nnodes 3 --nproc-per-node $np \
        --rdzv-backend c10d --rdzv-endpoint ${HOST_ADDR[1]}:$P --rdzv-id $JOB \
        --local-addr ${HOST_ADDR[$k]} --rdzv-conf join_timeout=30 \
        --no-python "$WORKER" dump "$T/w"
    [ $k = 1 ] && sleep 0.3  # host 1 binds the endpoint first
done
agents_exit 60 0 a1 a2 a3
check_ranks "$T/w" 0 4 3
for r in 0 1 2 3; do
    if [ "$(envval "$T/w/env.$r.0" GROUP_RANK)" = 0 ]; then
        h=$(envval "$T/w/env.$r.0" HOSTNO)
        expect_eq "MASTER_ADDR (group rank 0 is on host $h)" "${HOST_ADDR[$h]}" "$(envval "$T/w/env.$r.0" MASTER_ADDR)"
    fi
done

# part 2: a separate server in host 4
rm -f "$T/w"/*
ns_server 4 $P
for k in 1 2 3; do
    ns_bg $k b$k HOSTNO=$k -- "$MUSTER_BIN" run --nnodes 3 --nproc-per-node 1 \
        --rdzv-endpoint ${HOST_ADDR[4]}:$P --rdzv-id $JOB-2 --rdzv-conf join_timeout=30 \
        --no-python "$WORKER" dump "$T/w"
done
agents_exit 60 0 b1 b2 b3
check_ranks "$T/w" 0 3 3
for r in 0 1 2; do
    if [ "$(envval "$T/w/env.$r.0" GROUP_RANK)" = 0 ]; then
        h=$(envval "$T/w/env.$r.0" HOSTNO)
        expect_eq "MASTER_ADDR without --local-addr (group rank 0 on host $h)" "${HOST_ADDR[$h]}" \
            "$(envval "$T/w/env.$r.0" MASTER_ADDR)"
    fi
done
stop_server
assert_no_marked_left "after the jobs" 5
