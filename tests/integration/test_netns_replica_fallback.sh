#!/bin/bash
# Checkpoint replicas when the direct link cannot be set up: host 1 (the node of
# group rank 0) drops every incoming TCP connection (iptables in its namespace), as a firewall
# between nodes would; the receiver on host 2 asks the server (host 3) to relay, and the copy
# still arrives, byte-identical. The checkpoint is a directory (torch.distributed.checkpoint
# layout: .metadata, one shard per rank, a nested file). Then the firewall goes and the next
# checkpoint, a directory again, takes the direct link, on --replicate-port, its bytes on bulk
# streams on --replicate-port + 1; with only that port firewalled the third is relayed. Shell workers, no
# PyTorch.
. "$(dirname "$0")/ft.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

command -v iptables > /dev/null || { echo "SKIP: no iptables" >&2; exit 77; }
ns_job nsrfw 3 3
ns_exec 1 iptables -A INPUT -p tcp --syn -j DROP || { echo "SKIP: iptables does not work in a namespace here" >&2; exit 77; }
cat > "$T/wk.sh" <<EOW
#!/bin/bash
dcp() { # dcp NAME: a DCP-like directory, written then renamed into place
    local d="\$MUSTER_CHECKPOINT_DIR/.\$1.tmp"
    mkdir -p "\$d/extra"
    printf '{"step": %s}' "\${1#step-}" > "\$d/.metadata"
    head -c 3000000 /dev/urandom > "\$d/__0_0.distcp"
    head -c 2000000 /dev/urandom > "\$d/__1_0.distcp"
    echo nested > "\$d/extra/rng.bin"
    mv "\$d" "\$MUSTER_CHECKPOINT_DIR/\$1"
}
if [ "\$RANK" = 0 ]; then
    dcp step-10
    while [ ! -e "$T/go" ]; do sleep 0.1; done
    dcp step-20
    while [ ! -e "$T/go2" ]; do sleep 0.1; done
    dcp step-30
fi
for i in \$(seq 600); do [ -e "$T/release" ] && exit 0; sleep 0.1; done
exit 1
EOW
chmod +x "$T/wk.sh"
ns_replica_agents "$T/wk.sh" --replicate-port 29777
wait_for 60 grep_in "$T/a1.err" "step-10 replicated to group rank 1" ||
    { show_all; fail "step-10 was not replicated (firewalled sender)"; }
grep -q "step-10 replicated to group rank 1 ([0-9]* bytes in [0-9]* ms, relayed by the server)" "$T/a1.err" ||
    { show_all; fail "step-10 should have been relayed: the sender's port is firewalled"; }
grep -q "replica of checkpoint step-10 from group rank 0: no direct link" "$T/a2.err" ||
    { show_all; fail "the receiver did not say why it asked for the relay"; }
diff -r "$T/c1/step-10" "$T/c2/step-10" > /dev/null || fail "the relayed directory differs from the original"
# the sender's link listens on --replicate-port of the address its JOIN names (--local-addr),
# not on every address
ns_exec 1 ss -tln | grep -q " ${HOST_ADDR[1]}:29777 " ||
    fail "no listener on ${HOST_ADDR[1]}:29777 in host 1: $(ns_exec 1 ss -tln)"

ns_exec 1 iptables -F INPUT
: > "$T/go"
wait_for 60 grep_in "$T/a1.err" "step-20 replicated to group rank 1" ||
    { show_all; fail "step-20 was not replicated"; }
grep -q "step-20 replicated to group rank 1 ([0-9]* bytes in [0-9]* ms, direct link, bulk streams)" "$T/a1.err" ||
    { show_all; fail "step-20 should have gone on the direct link once the firewall was gone"; }
diff -r "$T/c1/step-20" "$T/c2/step-20" > /dev/null || fail "the directory copied on the link differs"
sum1=$(sed -n 's/.*step-20 recorded.*xxh3 \([0-9a-f]*\)).*/\1/p' "$T/a1.err")
grep -q "\"checksum\": *\"$sum1\"" "$T/c2/.muster/registry.json" ||
    fail "host 2's registry lacks step-20 with xxh3 $sum1: $(cat "$T/c2/.muster/registry.json")"
[ -z "$(ls -A "$T/c2" | grep '^\.muster-replica')" ] || fail "temporary files left on host 2: $(ls -A "$T/c2")"

# the link's port open, its bulk streams' port (--replicate-port + 1 for the first copy) closed:
# the bulk streams are given up after their 5 s set-up and the copy still arrives, relayed
ns_exec 1 iptables -A INPUT -p tcp --dport 29778 --syn -j DROP
: > "$T/go2"
wait_for 60 grep_in "$T/a1.err" "step-30 replicated to group rank 1" ||
    { show_all; fail "step-30 was not replicated (bulk port firewalled)"; }
grep -q "step-30 replicated to group rank 1 ([0-9]* bytes in [0-9]* ms, relayed by the server)" "$T/a1.err" ||
    { show_all; fail "step-30 should have been relayed: the bulk port is firewalled"; }
grep -q "step-30: the bulk streams to group rank 1 failed\|replica of checkpoint step-30 from group rank 0: no direct link" "$T/a1.err" "$T/a2.err" ||
    { show_all; fail "nobody said why step-30 left the bulk streams"; }
diff -r "$T/c1/step-30" "$T/c2/step-30" > /dev/null || fail "the relayed step-30 differs from the original"
: > "$T/release"
agents_exit 30 0 a1 a2
stop_server
assert_no_marked_left "end of test" 10
exit 0
