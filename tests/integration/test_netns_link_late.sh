#!/bin/bash
# Any start order across hosts: a node started while its rendezvous host's link is
# still down (no carrier: SYNs are lost, nothing refuses) keeps retrying and joins once the link
# comes up 60 s later, and the job runs to its exit code; a host that stays unreachable past the
# join timeout ends the node with one clear line and the rendezvous exit code (3).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

LATE=${LINK_LATE_S:-60}
ns_job late 2
ns_cut 2
ns_server 2 $P # listens on its own address; nobody can reach it yet
t0=$(date +%s)
ns_bg 1 a1 -- "$MUSTER_BIN" run --nnodes 1 --nproc-per-node 2 --rdzv-endpoint "${HOST_ADDR[2]}:$P" \
    --rdzv-id "$JOB" --rdzv-conf join_timeout=$((LATE + 60)) --no-python "$WORKER" dump "$T/w"
A1=$MPID
sleep "$LATE"
kill -0 "$A1" 2>/dev/null || { show_all; fail "the node gave up while its host's link was down (after $(($(date +%s) - t0)) s)"; }
ns_restore 2
t_up=$(date +%s)
agent_wait a1 60
expect_agent_rc a1 0
note "joined and finished $(($(date +%s) - t_up)) s after the link came up (started ${LATE} s before)"
check_ranks "$T/w" 0 2 1
n=$(grep -c "retry" "$T/a1.err")
[ "$n" -ge 1 ] || { show_all; fail "the node did not say what it retries"; }
[ "$n" -le $((LATE / 60 + 3)) ] || { show_all; fail "$n retry lines in ${LATE} s: more than one a minute"; }

# unreachable past the join timeout: one clear line, exit 3
ns_cut 2
rm -rf "$T/w2" && mkdir -p "$T/w2"
ns_bg 1 a2 -- "$MUSTER_BIN" run --nnodes 1 --nproc-per-node 1 --rdzv-endpoint "${HOST_ADDR[2]}:$P" \
    --rdzv-id "$JOB-2" --rdzv-conf join_timeout=8 --no-python "$WORKER" dump "$T/w2"
agent_wait a2 60
expect_agent_rc a2 3
[ -z "$(ls "$T/w2")" ] || fail "a worker started although the host was never reached"
grep -q "error: .*${HOST_ADDR[2]}:$P: no answer within the join timeout (8 s)" "$T/a2.err" || { show_all; fail "no clear line naming the unreachable endpoint"; }
note "last line: $(grep 'error' "$T/a2.err" | tail -1)"
exit 0
