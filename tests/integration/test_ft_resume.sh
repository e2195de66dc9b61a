#!/bin/bash
# Checkpoint registry + restart: the PyTorch example (train_ckpt.py, gloo, 2 workers)
# checkpoints every 3 steps into --checkpoint-dir; rank 1 fails at step 8 in attempt 0. With
# --max-restarts 1 the restart resumes from the newest checkpoint recorded before the failure
# (ckpt_6.pt), reaches the last step, exits 0, and its final parameters are bit-identical to a
# fault-free run's. A fault-free first run on a fresh directory resumes from nothing.
. "$(dirname "$0")/ft.sh"
need_torch

STEPS=12
ARGS=(--steps $STEPS --ckpt-every 3)

# 1. fault-free reference
C0="$T/ckpt-ref"
IT_TIMEOUT=120 ft_run -- --standalone --nproc-per-node 2 --checkpoint-dir "$C0" "$CKPT_PY" "${ARGS[@]}"
expect_rc "fault-free run" 0
ref=$(params_of "$T/out")
[ -n "$ref" ] || { show_output; fail "fault-free run: no 'done: ... params H' line from rank 0"; }
stdout_has "fault-free run" "[rank0]: done: step $STEPS of $STEPS, world_size 2, restart_count 0, params $ref"
grep -q 'resumes from' "$T/err" && { show_output; fail "fault-free run on an empty dir resumed from something"; }
grep -q 'resumed from' "$T/out" && { show_output; fail "fault-free run: a worker got MUSTER_RESUME_FROM"; }
expect_eq "checkpoints recorded by the fault-free run" "ckpt_3.pt ckpt_6.pt ckpt_9.pt ckpt_12.pt" \
    "$(recorded "$T/err" | tr '\n' ' ' | sed 's/ $//')"
for s in 3 6 9 12; do
    grep -qE "^muster: checkpoint ckpt_$s\.pt recorded \(step $s, [0-9]+ bytes, xxh3 [0-9a-f]{16}\)$" "$T/err" \
        || { show_output; fail "no well-formed 'checkpoint ckpt_$s.pt recorded (step $s, B bytes, xxh3 H)' line"; }
done
[ -f "$C0/.muster/registry.json" ] || fail "no registry at $C0/.muster/registry.json"
note "fault-free params $ref"

# 2. rank 1 fails at step 8 once; --step-sleep spaces the steps so that the checkpoint of step 6
#    is long recorded when the failure comes
C="$T/ckpt"
t0=$(now_ms)
IT_TIMEOUT=150 ft_run -- --standalone --nproc-per-node 2 --max-restarts 1 --checkpoint-dir "$C" \
    "$CKPT_PY" "${ARGS[@]}" --fail-at-step 8 --fail-rank 1 --step-sleep 0.1
expect_rc "rank 1 fails at step 8, --max-restarts 1" 0
stdout_has "failure injected" "[rank1]: rank 1: injected failure at step 8 (restart_count 0), exit 3"
stderr_has "restart" "restarting workers (restart 1/1)"

# the newest checkpoint recorded before the restart, from the recorded lines themselves
before=$(sed '/restarting workers/q' "$T/err" | sed -n 's/^muster: checkpoint \([^ ]*\) recorded.* (step \([0-9]*\),.*/\2 \1/p' \
    | sort -n | tail -1 | cut -d' ' -f2)
expect_eq "newest checkpoint recorded before the failure at step 8" ckpt_6.pt "$before"
expect_eq "resume lines (attempt, path)" "1 $C/ckpt_6.pt" "$(resumes_of "$T/err")"
for r in 0 1; do
    stdout_has "rank $r resumed" "[rank$r]: resumed from $C/ckpt_6.pt at step 6"
done
stdout_has "faulted run finished" "[rank0]: done: step $STEPS of $STEPS, world_size 2, restart_count 1, params"
got=$(params_of "$T/out")
expect_eq "final params after a failure and a resume vs the fault-free run" "$ref" "$got"
# the registry holds the checkpoints of both attempts, newest first
expect_eq "checkpoints on disk" "ckpt_12.pt ckpt_3.pt ckpt_6.pt ckpt_9.pt" "$(ckpts_in "$C" | tr '\n' ' ' | sed 's/ $//')"
grep -q '"ckpt_12.pt"' "$C/.muster/registry.json" || fail "registry lacks ckpt_12.pt: $(cat "$C/.muster/registry.json")"
note "fault at step 8 -> resumed from ckpt_6.pt, params $got identical, $(( $(now_ms) - t0 )) ms"

assert_no_marked_left "end of test" 10
exit 0
