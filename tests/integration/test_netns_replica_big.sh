#!/bin/bash
# A checkpoint far larger than a frame (200 MB vs 64 KiB) replicates between two namespace
# hosts with separate --checkpoint-dir, on the direct agent-to-agent link's bulk streams: byte-identical, both agents'
# heartbeats on time meanwhile, recorded in the receiver's
# registry with the sender's checksum, shown as a replica by `muster status`, with
# --replicate-bandwidth 0 (no cap). A synthetic trainer: rank 0 writes the file atomically.
. "$(dirname "$0")/ft.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

MB=${REPLICA_BIG_MB:-200}
ns_job nsrbig 3 3
cat > "$T/big.sh" <<EOW
#!/bin/bash
if [ "\$RANK" = 0 ]; then
    head -c ${MB}M /dev/urandom > "\$MUSTER_CHECKPOINT_DIR/.ckpt_1.bin.tmp"
    sync "\$MUSTER_CHECKPOINT_DIR/.ckpt_1.bin.tmp"
    mv "\$MUSTER_CHECKPOINT_DIR/.ckpt_1.bin.tmp" "\$MUSTER_CHECKPOINT_DIR/ckpt_1.bin"
fi
for i in \$(seq 600); do [ -e "$T/release" ] && exit 0; sleep 0.1; done
exit 1
EOW
chmod +x "$T/big.sh"
ns_replica_agents "$T/big.sh"
wait_for 60 grep_in "$T/a1.err" "checkpoint ckpt_1.bin recorded" || { show_all; fail "ckpt_1.bin not recorded on host 1"; }
wait_for 60 grep_in "$T/a2.err" "ckpt_1.bin stored as a replica" || { show_all; fail "no replica of the ${MB} MB checkpoint on host 2 within 60 s"; }
wait_for 10 grep_in "$T/a1.err" "ckpt_1.bin replicated to group rank 1" || { show_all; fail "host 1 did not see the replica finish"; }
cmp -s "$T/c1/ckpt_1.bin" "$T/c2/ckpt_1.bin" || fail "the replica differs from the original"
sum1=$(sed -n 's/.*ckpt_1.bin recorded.*xxh3 \([0-9a-f]*\)).*/\1/p' "$T/a1.err")
grep -q "\"checksum\": *\"$sum1\"" "$T/c2/.muster/registry.json" ||
    fail "host 2's registry lacks ckpt_1.bin with xxh3 $sum1: $(cat "$T/c2/.muster/registry.json")"
[ -z "$(ls -A "$T/c2" | grep '^\.muster-replica')" ] || fail "temporary files left on host 2: $(ls -A "$T/c2")"
line=$(grep "ckpt_1.bin replicated to group rank 1" "$T/a1.err")
ms=$(sed -n 's/.* bytes in \([0-9]*\) ms.*/\1/p' <<<"$line")
grep -q "ms, direct link, bulk streams)" <<<"$line" || fail "the copy did not go on the direct link's bulk streams: $line"
note "${MB} MB replicated in ${ms} ms ($(( MB * 1000 / (ms > 0 ? ms : 1) )) MB/s) on the direct link"
# muster status shows where the copies are: the writer's host and the replica's
st=$(ns_exec 1 "$MUSTER_BIN" status --rdzv-endpoint "${HOST_ADDR[3]}:$P" --rdzv-id "$JOB" --json 2>&1)
grep -q '"replicas": *\[ *"[^"]' <<<"$st" || grep -q '"replicas":\["' <<<"$st" ||
    fail "muster status lists no replica host for ckpt_1.bin: $st"
# neither agent's loop went silent while the bulk streams' threads read, sealed, opened and
# wrote the copy (heartbeats every second; a blocked loop would be silent for the whole copy)
gap=$(python3 -c '
import json, sys
doc = json.loads(sys.stdin.read())
jobs = doc["jobs"] if "jobs" in doc else [doc]
gaps = [n.get("heartbeat_gap_max_ms") for j in jobs for n in j.get("nodes", [])]
gaps = [g for g in gaps if g is not None]
print(max(gaps) if gaps else "")' <<<"$st")
[ -n "$gap" ] || fail "no heartbeat_gap_max_ms in muster status: $st"
note "largest silence of either agent during the copy: $gap ms (heartbeat every 1000 ms)"
[ "$gap" -le 1500 ] || fail "an agent was silent for $gap ms during the copy (limit 1500: interval + 500 ms)"
: > "$T/release"
agents_exit 30 0 a1 a2
stop_server
assert_no_marked_left "end of test" 10
exit 0
