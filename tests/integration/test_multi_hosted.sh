#!/bin/bash
# Three agents on loopback, no separate server: the endpoint is a free local port, so the agent
# that binds it first hosts the rendezvous (torchrun's c10d is_host), the others connect.
# Different --nproc-per-node (1, 2, 3): ranks unique and contiguous per node, offsets are prefix
# sums, one MASTER_ADDR/PORT, one restart count, output prefixed with [rank<N>]:.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

P=$(free_port)
mkdir -p "$T/w"
for i in 1 2 3; do
    agent a$i -- --nnodes 3 --nproc-per-node $i --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:$P --rdzv-id hosted-$$ --rdzv-conf join_timeout=30 \
        --no-python "$WORKER" dump "$T/w"
done
agents_exit 60 0 a1 a2 a3
check_ranks "$T/w" 0 6 3
for r in 0 1 2 3 4 5; do
    grep -qx "\[rank$r\]: hello-from-rank-$r attempt 0" "$T"/a*.out \
        || { show_all; fail "no '[rank$r]: hello-from-rank-$r' line in any agent's stdout"; }
done
# each agent prints the ranks of its own workers only: as many lines as its nproc
for i in 1 2 3; do
    n=$(grep -c '^\[rank[0-9]*\]: hello-from-rank' "$T/a$i.out")
    expect_eq "hello lines of agent a$i (nproc $i)" "$i" "$n"
done
expect_eq "TORCHELASTIC_RUN_ID" "hosted-$$" "$(envval "$T/w/env.0.0" TORCHELASTIC_RUN_ID)"
assert_no_marked_left "after the job" 5
