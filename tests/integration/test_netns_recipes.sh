#!/bin/bash
# torchrun's two multi-node recipes exactly as its documentation writes them, on two hosts
# (network namespaces) that share a HOME directory and are given no token at all:
#   c10d:   --nnodes=2 --rdzv-id=... --rdzv-backend=c10d --rdzv-endpoint=HOST1:29400
#   static: --nnodes=2 --node-rank=R --master-addr=HOST1 --master-port=29500
# The node that does not host the rendezvous starts several seconds first and waits for it. Then
# the same with two different HOME directories: both nodes say that the tokens differ, in one
# line that names the fix.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

ns_setup 2
H1=${HOST_ADDR[1]}
mkdir -m 700 "$T/home"
unset MUSTER_TOKEN

# recipe NAME HOME ARGS_FOR_HOST_K...: host 2 first, host 1 (the host) 3 s later
recipe() {
    local name=$1 home=$2
    shift 2
    mkdir -p "$T/$name"
    ns_bg 2 $name.2 HOME="$home" -- "$MUSTER_BIN" run "$@" $(args_for 2) --nproc-per-node=1 \
        --no-python "$WORKER" dump "$T/$name"
    sleep 3
    ns_bg 1 $name.1 HOME="$home" -- "$MUSTER_BIN" run "$@" $(args_for 1) --nproc-per-node=1 \
        --no-python "$WORKER" dump "$T/$name"
}

check_job() {
    local name=$1 k r
    for k in 1 2; do
        agent_wait $name.$k 120
        expect_agent_rc $name.$k 0
    done
    for r in 0 1; do
        [ -f "$T/$name/env.$r.0" ] || { show_all; fail "$name: rank $r did not start"; }
        expect_eq "$name: WORLD_SIZE of rank $r" 2 "$(envval "$T/$name/env.$r.0" WORLD_SIZE)"
        expect_eq "$name: MASTER_ADDR of rank $r" "$H1" "$(envval "$T/$name/env.$r.0" MASTER_ADDR)"
    done
    grep -q "waiting for the rendezvous at $H1" "$T/$name.2.err" ||
        { show_all; fail "$name: host 2 did not say what it waited for"; }
}

# 1. c10d
args_for() { :; }
recipe c10d "$T/home" --nnodes=2 --rdzv-id=456 --rdzv-backend=c10d --rdzv-endpoint=$H1:29400
check_job c10d
grep -q "^\[rank0\]" "$T/c10d.1.out" || fail "c10d: rank 0 is not on the host of the endpoint"

# 2. static: ranks follow --node-rank, MASTER_PORT as given
args_for() { echo "--node-rank=$(($1 - 1))"; }
recipe static "$T/home" --nnodes=2 --master-addr=$H1 --master-port=29500
check_job static
for r in 0 1; do
    expect_eq "static: MASTER_PORT" 29500 "$(envval "$T/static/env.$r.0" MASTER_PORT)"
    expect_eq "static: GROUP_RANK of rank $r" $r "$(envval "$T/static/env.$r.0" GROUP_RANK)"
done
grep -q "^\[rank1\]" "$T/static.2.out" || fail "static: rank 1 is not on the node with --node-rank=1"
[ "$(stat -c %a "$T/home/.muster/token")" = 600 ] || fail "the shared per-user token is not 0600"

# 3. homes not shared: each node made its own token; both say so and name the fix
mkdir -m 700 "$T/home1" "$T/home2"
ns_bg 1 diff.1 HOME="$T/home1" -- "$MUSTER_BIN" run --nnodes=2 --rdzv-id=789 --rdzv-backend=c10d \
    --rdzv-endpoint=$H1:29401 --rdzv-conf join_timeout=15 --no-python /bin/true
sleep 1
ns_bg 2 diff.2 HOME="$T/home2" -- "$MUSTER_BIN" run --nnodes=2 --rdzv-id=789 --rdzv-backend=c10d \
    --rdzv-endpoint=$H1:29401 --rdzv-conf join_timeout=15 --no-python /bin/true
agent_wait diff.2 60
[ "$RC" = 3 ] || { show_all; fail "a node with another token: expected exit 3, got $RC"; }
grep -q "the nodes' tokens differ: this node uses $T/home2/.muster/token, which it created just now, so its home directory is not shared" "$T/diff.2.err" ||
    { show_all; fail "the refused node does not say that the homes are not shared"; }
agent_wait diff.1 60
grep -q "the nodes' tokens differ (this node uses $T/home1/.muster/token): share the home directory, or give every node --token-file FILE or MUSTER_TOKEN; the refused node has stopped, this one waits for nodes until the join timeout" "$T/diff.1.err" ||
    { show_all; fail "the hosting node does not say that the tokens differ and that it goes on waiting"; }
assert_no_marked_left "after the recipes" 10
