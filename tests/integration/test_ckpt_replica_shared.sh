#!/bin/bash
# Checkpoint replicas with a shared --checkpoint-dir: both agents see the same
# directory and registry, so the receiver answers "already here" and nothing is copied; no
# temporary file is left, the checkpoint is recorded once. Loopback, a shell worker.
. "$(dirname "$0")/ft.sh"
. "$(dirname "$0")/multi.sh"

start_job rshared
C="$T/shared"
cat > "$T/wk.sh" <<EOW
#!/bin/bash
if [ "\$RANK" = 0 ]; then
    head -c 3000000 /dev/urandom > "\$MUSTER_CHECKPOINT_DIR/.ckpt_7.pt.tmp"
    mv "\$MUSTER_CHECKPOINT_DIR/.ckpt_7.pt.tmp" "\$MUSTER_CHECKPOINT_DIR/ckpt_7.pt"
fi
for i in \$(seq 300); do [ -e "$T/release" ] && exit 0; sleep 0.1; done
exit 1
EOW
chmod +x "$T/wk.sh"
replica_agents "$T/wk.sh" "$C" "$C"
wait_for 30 grep_in "$T/a1.err" "ckpt_7.pt replicated to group rank 1" ||
    { show_all; fail "no replica outcome for ckpt_7.pt"; }
grep -q "ckpt_7.pt replicated to group rank 1 (3000000 bytes in [0-9]* ms, already here)" "$T/a1.err" ||
    { show_all; fail "the receiver copied a checkpoint it already sees in the shared directory"; }
grep -q "stored as a replica" "$T/a2.err" && fail "host 2 stored a replica of a shared checkpoint"
[ -z "$(ls -A "$C" | grep '^\.muster-replica')" ] || fail "temporary files left: $(ls -A "$C")"
: > "$T/release"
agents_exit 30 0 a1 a2
stop_server
assert_no_marked_left "end of test" 10
exit 0
