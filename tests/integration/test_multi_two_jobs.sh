#!/bin/bash
# Two jobs on one server are isolated: job A (--nnodes 2, nproc 1) and job B (--nnodes 2,
# nproc 2). With one agent of each waiting, neither round closes (a node of B does not count for
# A); then the second agents come and each job gets its own world (2 and 4 ranks), its own
# MASTER_PORT owner and its own run id. Job B failing and restarting leaves job A alone.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server
A=jobA-$$
B=jobB-$$
mkdir -p "$T/wa" "$T/wb"
run_a() { agent "$1" -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $A \
    --rdzv-conf join_timeout=30 --no-python "$WORKER" hold "$T/wa"; }
run_b() { agent "$1" -- --nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $B \
    --rdzv-conf join_timeout=30 --max-restarts 1 --no-python "$WORKER" fail-once "$T/wb" 3 7; }
run_a a1
run_b b1
wait_for 10 grep -q "rendezvous $A: 1/2 nodes" "$T/a1.err" || { show_all; fail "a1 shows no 'rendezvous $A: 1/2 nodes'"; }
wait_for 10 grep -q "rendezvous $B: 1/2 nodes" "$T/b1.err" || { show_all; fail "b1 shows no 'rendezvous $B: 1/2 nodes'"; }
sleep 1
[ -z "$(ls "$T/wa" "$T/wb" | grep env)" ] || fail "a round closed with one node of each job: $(ls "$T/wa" "$T/wb")"
grep -q '2/2 nodes' "$T/a1.err" "$T/b1.err" && fail "an agent counted the other job's node"

run_a a2
wait_for 20 files_at_least 2 "$T/wa/ready.*.0" || { show_all; fail "job A did not start"; }
run_b b2
agents_exit 60 0 b1 b2
check_ranks "$T/wb" 1 4 2
# job A was not disturbed by B's failure and restart
[ -e "$T/wa/env.0.1" ] && fail "job A restarted when job B did"
ls "$T/wa" | grep -q '^stop\.' && fail "job A's workers were stopped by job B's restart"
: > "$T/wa/release"
agents_exit 30 0 a1 a2
check_ranks "$T/wa" 0 2 2
expect_eq "job A run id" "$A" "$(envval "$T/wa/env.0.0" TORCHELASTIC_RUN_ID)"
expect_eq "job B run id" "$B" "$(envval "$T/wb/env.0.1" TORCHELASTIC_RUN_ID)"
grep -q "$A" "$T/wb/env.0.1" && fail "job B's workers see job A's id"
stop_server
assert_no_marked_left "after the jobs" 5
