#!/bin/bash
# Pre-emption and requeue through the real scheduler: examples/slurm/train.sbatch (--requeue) on
# three nodes; once rank 0 has written a checkpoint, `scancel --signal=TERM` signals the job's
# steps (what Slurm's pre-emption does). Every muster forwards it to its workers, which stop
# after the same step; rank 0 writes a final checkpoint, muster exits 75, the script requeues the
# job (`scontrol requeue`), and the second run (SLURM_RESTART_COUNT=1, same job id, same
# rendezvous id) resumes from that checkpoint (step N > 0) and trains to the end. (Rank 0 may
# stop on its peers' vote a moment before its own SIGTERM arrives: either is a stop by signal.)
. "$(dirname "$0")/cluster.sh"

sl_start
have_torch || fail "$TORCH_PY cannot import torch.distributed (run tools/bootstrap.sh: python3-torch)"
OUT=$T/train.out
STEPS=200
id=$(sl_submit_train "$OUT" -- --steps $STEPS --ckpt-every 10 --step-sleep 0.05) ||
    sl_fail "sbatch failed: $id"
note "job $id submitted"
_recorded() { grep -q '^muster: checkpoint ckpt_[0-9]*\.pt recorded' "$OUT" 2>/dev/null; }
sl_poll 180 _recorded || { cat "$OUT" >&2; sl_fail "no checkpoint recorded within 180 s"; }
t0=$(now_ms)
sl scancel --signal=TERM "$id" || sl_fail "scancel --signal=TERM $id failed"
note "scancel --signal=TERM $id after $(grep -c 'recorded' "$OUT") checkpoint(s)"

_exited75() { grep -q "muster exited with 75" "$OUT" 2>/dev/null; }
sl_poll 150 _exited75 || { cat "$OUT" >&2; sl_fail "muster did not exit 75 within 150 s of the signal"; }
# all the nodes' workers stop within a second or two; when one hangs on its way out, muster
# SIGKILLs it after the script's --shutdown-timeout (90 s)
note "muster exited 75 $(($(now_ms) - t0)) ms after the signal"
_second_run() { grep -q "job $id run 1 " "$OUT" 2>/dev/null; }
sl_poll 120 _second_run || { cat "$OUT" >&2; sl scontrol show job "$id" >&2; sl_fail "the job did not start again"; }
note "requeued job started again $(($(now_ms) - t0)) ms after the signal"
st=$(sl_wait_state "$id" 240 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL) ||
    { cat "$OUT" >&2; sl_fail "job $id still $st after 240 s"; }
[ "$st" = COMPLETED ] || { cat "$OUT" >&2; sl_fail "job $id ended $st"; }

# first run: the final checkpoint, exit 75, the requeue
stop=$(grep -E -o '^\[rank0\]: stopping on (signal 15|a signal to another rank) at step [0-9]+: final checkpoint .*' "$OUT") ||
    { cat "$OUT" >&2; sl_fail "rank 0 did not stop on SIGTERM with a final checkpoint"; }
n=$(echo "$stop" | sed 's/.* at step \([0-9]*\):.*/\1/')
grep -q "muster exited with 75" "$OUT" || { cat "$OUT" >&2; sl_fail "muster did not exit 75"; }
grep -q "requeueing job $id" "$OUT" || { cat "$OUT" >&2; sl_fail "the script did not requeue"; }
# second run: resumed from that step, trained to the end
grep -q "^\[rank0\]: resumed from $T/ckpt/ckpt_$n.pt at step $n\$" "$OUT" ||
    { cat "$OUT" >&2; sl_fail "the second run did not resume from ckpt_$n.pt"; }
if [ "$n" -le 0 ] || [ "$n" -ge $STEPS ]; then sl_fail "stopped at step $n"; fi
grep -q "^\[rank0\]: done: step $STEPS of $STEPS, world_size 3" "$OUT" ||
    { cat "$OUT" >&2; sl_fail "the second run did not finish"; }
grep -q "muster exited with 0" "$OUT" || { cat "$OUT" >&2; sl_fail "the second muster did not exit 0"; }
# every node gets the signal from Slurm: none restarts its workers on another's pre-emption
# (a note, not a failure: a worker can still stop on its peers' vote just before its own
# agent's signal arrives, and that counts as a failure)
first=$(sed -n "1,/muster exited with 75/p" "$OUT")
if echo "$first" | grep -q 'restarting workers'; then
    note "note: a node restarted its workers during the pre-emption: $(echo "$first" | grep -m1 'restarting workers')"
fi
note "job $id: stopped at step $n (exit 75), requeued, resumed at step $n, done at $STEPS"
