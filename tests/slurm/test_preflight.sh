#!/bin/bash
# `srun --nodes 3 muster preflight --nproc-per-node 2` through the real scheduler: one muster per
# node, rendezvous, node count and id from SLURM_*; on these GPU-less nodes the pre-flight runs
# its CPU stages (inventory, TCP mesh between the three nodes and MASTER_ADDR:MASTER_PORT).
# (0) The cluster itself: `srun -N3` runs one task on each node, n1..n3, and each resolves n1.
# (1) All links open: every task exits 0 and the report names the three nodes' mesh.
# (2) n3 refuses every new incoming connection but slurmd's (iptables in its namespace): the
# pre-flight fails (exit 4) and the report names n3's address.
. "$(dirname "$0")/cluster.sh"

command -v iptables >/dev/null || fail "iptables is not installed (run tools/bootstrap.sh)"
sl_start
out=$(sl srun -N3 --ntasks-per-node=1 -t 1 bash -c 'echo "$(hostname) $SLURM_NODEID $(getent hosts n1 | cut -d" " -f1)"' 2>&1) ||
    { echo "$out" >&2; sl_fail "srun -N3 hostname failed"; }
for k in 1 2 3; do
    echo "$out" | grep -q "^n$k $((k - 1)) ${HOST_ADDR[1]}\$" || { echo "$out" >&2; sl_fail "no line from n$k"; }
done

PF=(srun --nodes 3 --ntasks-per-node 1 --time 2 "$MUSTER_BIN" preflight --nproc-per-node 2
    --preflight-timeout 10)
# pf_run NAME WHAT WANT: the pre-flight (PF) into $T/NAME.out; notes how long it took and fails
# the test unless srun exits WANT.
pf_run() {
    local t0 rc
    t0=$(now_ms)
    sl "${PF[@]}" > "$T/$1.out" 2>&1
    rc=$?
    note "$2: srun exit $rc after $(($(now_ms) - t0)) ms"
    [ $rc = "$3" ] || { cat "$T/$1.out" >&2; sl_fail "srun muster preflight exited $rc ($2), not $3"; }
}

pf_run ok "healthy pre-flight" 0
grep -q "TCP mesh: 3 nodes, every link and MASTER_ADDR:MASTER_PORT .* reachable" "$T/ok.out" ||
    { cat "$T/ok.out" >&2; sl_fail "no 'every link reachable' line"; }
[ "$(grep -c 'preflight: passed' "$T/ok.out")" -ge 1 ] ||
    { cat "$T/ok.out" >&2; sl_fail "the pre-flight did not say it passed"; }

sl_node 3 iptables -A INPUT -p tcp --syn ! --dport 6818 -j REJECT --reject-with tcp-reset ||
    sl_fail "iptables in n3's namespace"
pf_run h3 "n3 unreachable" 4
grep -Eq "cannot reach node [^ ]+ \(group rank [0-9]\) at ${HOST_ADDR[3]//./\\.}:[0-9]+: connect" "$T/h3.out" ||
    { cat "$T/h3.out" >&2; sl_fail "the report does not name n3 (${HOST_ADDR[3]})"; }
