#!/bin/bash
# Pre-flight TCP mesh across three "hosts" (network namespaces), no GPU: `muster preflight
# --nproc-per-node 1` runs the inventory (CPU job) and mesh stages. (1) Every link open: all
# three agents exit 0 and group rank 0's node reports every link and MASTER_ADDR:MASTER_PORT.
# (2) A firewall on every host rejects new connections to MASTER_PORT: the job fails (exit 4)
# and the report names MASTER_ADDR:MASTER_PORT with its port. (3) Host 3 rejects every new
# incoming connection: the report names host 3's address and mesh port.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

command -v iptables >/dev/null || skip "iptables is not installed (tools/bootstrap.sh installs it)"
ns_setup 3
P=29400
MP=29555

run_job() { # run_job TAG RC: one `muster preflight` per host, host 1 hosts the rendezvous; each exits RC
    local tag=$1 k
    for k in 1 2 3; do
        ns_bg $k $tag$k -- "$MUSTER_BIN" preflight --nnodes 3 --nproc-per-node 1 \
            --rdzv-endpoint ${HOST_ADDR[1]}:$P --rdzv-id pf-$tag-$$ --master-port $MP \
            --local-addr ${HOST_ADDR[$k]} --preflight-timeout 10 --rdzv-conf join_timeout=30
        [ $k = 1 ] && sleep 0.3
    done
    agents_exit 90 "$2" ${tag}1 ${tag}2 ${tag}3
}
# block_master_port A|D: add (A) or delete (D) a rule on every host that refuses MASTER_PORT
block_master_port() {
    local k
    for k in 1 2 3; do
        ns_exec $k iptables -"$1" INPUT -p tcp --dport $MP --syn -j REJECT --reject-with tcp-reset
    done
}
all_err() { cat "$T/$1"1.err "$T/$1"2.err "$T/$1"3.err; }

# (1) healthy
run_job ok 0
all_err ok | grep -q "TCP mesh: 3 nodes, every link and MASTER_ADDR:MASTER_PORT .*:$MP reachable" \
    || { all_err ok >&2; fail "no 'every link reachable' line in the healthy run"; }
all_err ok | grep -q "preflight: passed" || fail "the healthy pre-flight did not say it passed"

# (2) MASTER_PORT blocked on every host
block_master_port A
run_job mp 4
all_err mp | grep -q "cannot reach MASTER_ADDR:MASTER_PORT 10\.77\.[0-9]*\.[0-9]*:$MP: connect" \
    || { all_err mp >&2; fail "the blocked MASTER_PORT $MP was not named"; }
block_master_port D

# (3) host 3 refuses every new incoming connection (its own outgoing ones still work)
ns_exec 3 iptables -A INPUT -p tcp --syn -j REJECT --reject-with tcp-reset
run_job h3 4
all_err h3 | grep -Eq "cannot reach node [^ ]+ \(group rank [0-9]\) at ${HOST_ADDR[3]//./\\.}:[0-9]+: connect" \
    || { all_err h3 >&2; fail "host 3's blocked mesh port was not named"; }
ns_exec 3 iptables -D INPUT -p tcp --syn -j REJECT --reject-with tcp-reset
assert_no_marked_left "after the pre-flights" 5
