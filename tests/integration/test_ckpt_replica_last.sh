#!/bin/bash
# The last checkpoint of a job that finishes reaches its replica: rank 0 writes a
# checkpoint and every worker exits 0 at once; the node of rank 0 waits for the copy
# (--replicate-bandwidth 15 makes it take ~2 s) before it reports done, so the job ends with
# the copy verified on the other node. Loopback, two agents with their own --checkpoint-dir.
. "$(dirname "$0")/ft.sh"
. "$(dirname "$0")/multi.sh"

start_job rlast
cat > "$T/wk.sh" <<EOW
#!/bin/bash
if [ "\$RANK" = 0 ]; then
    head -c 30000000 /dev/urandom > "\$MUSTER_CHECKPOINT_DIR/.ckpt_9.pt.tmp"
    mv "\$MUSTER_CHECKPOINT_DIR/.ckpt_9.pt.tmp" "\$MUSTER_CHECKPOINT_DIR/ckpt_9.pt"
fi
exit 0
EOW
chmod +x "$T/wk.sh"
replica_agents "$T/wk.sh" "$T/c1" "$T/c2" --replicate-bandwidth 15
agents_exit 60 0 a1 a2
if grep -q "checkpoint ckpt_9.pt recorded" "$T/a1.err"; then s=1 d=2; else s=2 d=1; fi
grep -q "waiting for the replicas of checkpoint ckpt_9.pt" "$T/a$s.err" ||
    { show_all; fail "the node of rank 0 did not wait for its last checkpoint's replica"; }
grep -q "ckpt_9.pt stored as a replica" "$T/a$d.err" ||
    { show_all; fail "the job ended before its last checkpoint reached the other node"; }
cmp -s "$T/c$s/ckpt_9.pt" "$T/c$d/ckpt_9.pt" || fail "the replica differs from the original"
[ -z "$(ls -A "$T/c$d" | grep '^\.muster-replica')" ] || fail "temporary files left: $(ls -A "$T/c$d")"
stop_server
assert_no_marked_left "end of test" 10
exit 0
