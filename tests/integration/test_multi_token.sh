#!/bin/bash
# A server started with MUSTER_TOKEN in its environment refuses agents without that token (the
# agent fails fast with a non-zero code, no worker starts) and accepts agents that carry it;
# the workers get a MUSTER_TOKEN of their own: the job's worker credential, never the server's
# token (protocol 3, rendezvous/cred.h).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server MUSTER_TOKEN=tok-$$-secret
JOB=tok-$$
mkdir -p "$T/w"
agent bad -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
    --rdzv-conf join_timeout=20 --no-python "$WORKER" dump "$T/w"
agent_wait bad 15
[ "$RC" != 0 ] || fail "an agent without the token was accepted"
[ -z "$(ls "$T/w")" ] || fail "a worker started without the token"
agent bad2 MUSTER_TOKEN=wrong -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT \
    --rdzv-id $JOB --rdzv-conf join_timeout=20 --no-python "$WORKER" dump "$T/w"
agent_wait bad2 15
[ "$RC" != 0 ] || fail "an agent with a wrong token was accepted"
agent good MUSTER_TOKEN=tok-$$-secret -- --nnodes 1 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$SPORT \
    --rdzv-id $JOB --rdzv-conf join_timeout=20 --no-python "$WORKER" dump "$T/w"
agent_wait good 30
expect_agent_rc good 0
check_ranks "$T/w" 0 2 1
WT=$(envval "$T/w/env.0.0" MUSTER_TOKEN)
case "$WT" in
muster-worker-v1:$JOB:????????????????????????????????????????????????????????????????) ;;
*) fail "workers' MUSTER_TOKEN is not the job's worker credential: '${WT:0:40}...'" ;;
esac
[ "$WT" = "$(envval "$T/w/env.1.0" MUSTER_TOKEN)" ] || fail "the two workers got different credentials"
grep -rq "tok-$$-secret" "$T/w" && fail "the server's token reached a worker"
stop_server
assert_no_marked_left "after the job" 5
