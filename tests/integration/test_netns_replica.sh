#!/bin/bash
# Checkpoint replicas without a shared file system: 3 namespace hosts with separate
# --checkpoint-dir, server on host 4, `--nnodes 2:3 --replicate-checkpoints 1`. The PyTorch
# example (train_ckpt.py) checkpoints on host 1 (group rank 0); each checkpoint is copied to
# the agent of group rank 1 (host 2). Host 1 is cut off and its agent SIGKILLed (its
# checkpoints are gone with it); a replacement agent with an empty directory joins on host 1.
# The next round must give group rank 0 to host 2, resume from the newest replica there, and
# end with parameters bit-identical to a fault-free run.
# With REPLICA_CORRUPT=1 (test_netns_replica_corrupt.sh) the newest replica is altered right
# after the cut: it must be skipped for the next newest one.
. "$(dirname "$0")/ft.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"
need_torch

STEPS=40
ARGS=(--steps $STEPS --ckpt-every 5)
CORRUPT=${REPLICA_CORRUPT:-0}

ns_job nsrepl 4 4

# 1. fault-free reference: one host, 3 workers (the same world of 3 ranks)
IT_TIMEOUT=120 ft_run -- --standalone --nproc-per-node 3 --checkpoint-dir "$T/ref" "$CKPT_PY" "${ARGS[@]}"
expect_rc "fault-free run" 0
ref=$(params_of "$T/out")
[ -n "$ref" ] || { show_output; fail "fault-free run: no 'done: ... params H' line from rank 0"; }
note "fault-free params $ref"

# 2. three hosts, separate directories, one replica per checkpoint
start_agent() { # start_agent K NAME DIR
    ns_bg "$1" "$2" PYTHON_EXEC="$TORCH_PY" GLOO_SOCKET_IFNAME=$NS_IF -- "$MUSTER_BIN" run \
        --nnodes 2:3 --nproc-per-node 1 --rdzv-endpoint "${HOST_ADDR[4]}:$P" --rdzv-id "$JOB" \
        --local-addr "${HOST_ADDR[$1]}" --max-restarts 2 --checkpoint-dir "$3" \
        --replicate-checkpoints 1 \
        --rdzv-conf join_timeout=60,last_call_timeout=5,heartbeat_timeout=2,keep_alive_interval=0.5 \
        "$CKPT_PY" "${ARGS[@]}" --step-sleep 0.15
}
for k in 1 2 3; do
    start_agent $k a$k "$T/c$k"
    sleep 0.3 # join order = group rank in round 0
done
wait_for 60 grep_in "$T/a2.err" "ckpt_15.pt stored as a replica" ||
    { show_all; fail "no replica of ckpt_15.pt on host 2 within 60 s"; }
grep -q '^\[rank0\]' "$T/a1.out" || { show_all; fail "group rank 0 is not on host 1"; }
grep -q "checkpoint ckpt_15.pt replicated to group rank 1" "$T/a1.err" ||
    { show_all; fail "host 1 did not log the replica of ckpt_15.pt as done"; }
[ -z "$(ls -A "$T/c3" | grep -v '^\.')" ] || fail "host 3 (group rank 2) got checkpoints: $(ls "$T/c3")"

# 3. host 1 cut off, its agent killed: no FIN reaches anyone
ns_cut 1
kill -9 "${APID[a1]}"
wait "${APID[a1]}" 2>/dev/null
newest=$(sed -n 's/^muster: checkpoint ckpt_\([0-9]*\)\.pt stored as a replica.*/\1/p' "$T/a2.err" | sort -n | tail -1)
expect=$newest
if [ "$CORRUPT" = 1 ]; then
    f="$T/c2/ckpt_$newest.pt"
    printf '\xff\xfe\xfd\xfc' | dd of="$f" bs=1 seek=$(( $(stat -c %s "$f") / 2 )) conv=notrunc status=none
    expect=$(sed -n 's/^muster: checkpoint ckpt_\([0-9]*\)\.pt stored as a replica.*/\1/p' "$T/a2.err" | sort -n | tail -2 | head -1)
    [ "$expect" != "$newest" ] || fail "only one replica on host 2: nothing older to fall back to"
fi
note "newest replica on host 2: ckpt_$newest.pt; expected resume: ckpt_$expect.pt"
wait_for 20 grep_in "$T/a2.err" "restarting workers" || { show_all; fail "the cut of host 1 was not noticed"; }
ns_restore 1
start_agent 1 a1b "$T/c1b" # a replacement node with an empty directory
wait_for 60 grep_in "$T/a2.err" "attempt 1 resumes from" || { show_all; fail "round 1 did not start on host 2"; }
expect_eq "host 2's resume line" "1 $T/c2/ckpt_$expect.pt" "$(resumes_of "$T/a2.err")"
if [ "$CORRUPT" = 1 ]; then
    grep -q "checkpoint ckpt_$newest.pt skipped: checksum" "$T/a2.err" ||
        { show_all; fail "the altered replica ckpt_$newest.pt was not reported as skipped"; }
fi
agents_exit 90 0 a2 a3 a1b
cat "$T/a2.out" "$T/a3.out" "$T/a1b.out" > "$T/all.out"
grep -q "^\[rank0\]: resumed from $T/c2/ckpt_$expect.pt at step $expect" "$T/a2.out" ||
    { cat "$T/all.out" >&2; fail "rank 0 (host 2) did not resume from ckpt_$expect.pt"; }
got=$(params_of "$T/all.out")
grep -q "^\[rank0\]: done: step $STEPS of $STEPS, world_size 3, restart_count 1" "$T/all.out" ||
    { cat "$T/all.out" >&2; fail "no final line of the resumed round (world 3, restart 1)"; }
expect_eq "final params after losing rank 0's node, resumed from a replica, vs fault-free" "$ref" "$got"
note "resumed from replica ckpt_$expect.pt on host 2, params $got identical"
stop_server 2>/dev/null || true
assert_no_marked_left "end of test" 10
exit 0
