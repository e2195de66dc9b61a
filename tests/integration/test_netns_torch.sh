#!/bin/bash
# The real client across two hosts: Debian's PyTorch DDP example (gloo, env://) with 2 hosts x
# 2 workers, hosts as network namespaces. Host 1's agent hosts the rendezvous at its address;
# GLOO_SOCKET_IFNAME is the veth inside each namespace. Every rank reports and rank 0 ends with
# bit-identical parameters across all 4 ranks.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
EX="$MUSTER_SRC/examples/pytorch/train_ddp.py"
[ -f "$EX" ] || fail "missing $EX"
ns_setup 2
JOB=nstorch-$$
P=29400
for k in 1 2; do
    ns_bg $k a$k PYTHON_EXEC="$TORCH_PY" GLOO_SOCKET_IFNAME=$NS_IF -- "$MUSTER_BIN" run \
        --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint ${HOST_ADDR[1]}:$P \
        --rdzv-id $JOB --local-addr ${HOST_ADDR[$k]} --rdzv-conf join_timeout=60 \
        "$EX" --steps 20
    [ $k = 1 ] && sleep 0.3
done
agents_exit 240 0 a1 a2
cat "$T/a1.out" "$T/a2.out" > "$T/all.out"
for r in 0 1 2 3; do
    grep -q "^\[rank$r\]: rank $r/4 " "$T/all.out" || { show_all; cat "$T/all.out" >&2; fail "rank $r did not report in"; }
done
grep -q "^\[rank0\]: final loss .* world_size 4, restart_count 0, params identical across ranks: True" "$T/all.out" \
    || { cat "$T/all.out" >&2; fail "no successful final line from rank 0"; }
# ranks 0,1 and 2,3 live on different hosts
a0=$(grep -l '^\[rank0\]' "$T/a1.out" "$T/a2.out")
a2=$(grep -l '^\[rank2\]' "$T/a1.out" "$T/a2.out")
[ "$a0" != "$a2" ] || fail "ranks 0 and 2 ran under the same agent"
assert_no_marked_left "after the job" 10
