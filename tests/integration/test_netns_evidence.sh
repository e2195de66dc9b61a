#!/bin/bash
# A hang across two hosts (network namespaces) x 2 ranks of real PyTorch (gloo), no heartbeat
# file: host 2's local rank 1 sleeps inside load_batch while the 3 others wait in all_reduce.
# Host 1 notices first (its --hang-timeout is the shorter), yet the server, having every rank's
# evidence, names host 2's rank as the culprit and charges host 2: with --exclude-after 1 host 2
# is excluded (its agent exits 3), not host 1, whose job restarts alone (--nnodes 1:2) and
# finishes; muster status shows the verdict meanwhile. Both hosts' bundles hold their ranks'
# stacks.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
PY="$MUSTER_SRC/tests/integration/trainers/evidence_worker.py"
SLEEP_LINE=$(grep -n 'time.sleep(3600)' "$PY" | cut -d: -f1)
ns_setup 2
JOB=nsev-$$
P=29400
ht=(x 3 20) # host 1 notices the stall first
for k in 1 2; do
    culprit=()
    [ $k = 2 ] && culprit=(EVIDENCE_MODE=sleep EVIDENCE_CULPRIT=1)
    ns_bg $k a$k PYTHON_EXEC="$TORCH_PY" GLOO_SOCKET_IFNAME=$NS_IF STEPS=50 ${culprit[@]+"${culprit[@]}"} \
        -- "$MUSTER_BIN" run --nnodes 1:2 --nproc-per-node 2 --rdzv-backend c10d \
        --rdzv-endpoint ${HOST_ADDR[1]}:$P --rdzv-id $JOB --local-addr ${HOST_ADDR[$k]} \
        --rdzv-conf join_timeout=60,last_call_timeout=30 --max-restarts 1 --exclude-after 1 \
        --hang-timeout ${ht[$k]} --log-dir "$T/logs$k" "$PY"
    [ $k = 1 ] && sleep 0.3
done
agent_wait a2 180
expect_agent_rc a2 3
# while host 1 trains alone, muster status shows the last verdict
wait_for 60 sh -c "ip netns exec ${NS_HOST[1]} '$MUSTER_BIN' status --rdzv-endpoint ${HOST_ADDR[1]}:$P \
    --rdzv-id $JOB > '$T/st.out' 2>&1; grep -q 'last root cause (round 0): rank .* never entered all_reduce' '$T/st.out'" \
    || { cat "$T/st.out" >&2; fail "muster status does not show the last root cause"; }
agent_wait a1 180
expect_agent_rc a1 0
# which ranks host 2 held in round 0
r2=$(grep -o '^\[rank[0-9]\]: step 0 rank [0-9]' "$T/a2.out" | grep -o '[0-9]$' | sort -n | tail -1)
[ -n "$r2" ] || { cat "$T/a2.out" >&2; fail "host 2 printed no step"; }
c=$(grep -h -m1 'root cause: ' "$T/a1.err" | sed 's/.*root cause: //')
echo "$c" | grep -q "^rank $r2 (.*, local_rank 1) never entered all_reduce; it is in evidence_worker.py:$SLEEP_LINE in load_batch; ranks .* waited in all_reduce for [0-9]* s" \
    || { cat "$T/a1.err" >&2; fail "the root cause does not name host 2's rank $r2: '$c'"; }
grep -q "hung: no progress" "$T/a1.err" || { cat "$T/a1.err" >&2; fail "host 1 did not notice the hang"; }
grep -q "is excluded from job $JOB" "$T/a2.err" || { cat "$T/a2.err" >&2; fail "host 2 was not told it is excluded"; }
grep -q "is excluded from job" "$T/a1.err" && fail "host 1, the victim, was excluded"
grep -q "^\[rank1\]: done rank 1" "$T/a1.out" || { tail -20 "$T/a1.out" >&2; fail "host 1 did not finish the job alone"; }
for k in 1 2; do
    b=$(find "$T/logs$k" -path '*/evidence/attempt_0' -type d | head -1)
    [ -n "$b" ] || { find "$T/logs$k" >&2; fail "host $k kept no evidence bundle"; }
    [ "$(ls "$b"/rank*.txt | wc -l)" = 2 ] || { ls "$b" >&2; fail "host $k's bundle does not hold its 2 ranks"; }
    grep -q 'File ".*evidence_worker.py", line' "$b"/rank*.txt || fail "host $k's bundle has no Python stack"
done
assert_no_marked_left "after the job" 10
