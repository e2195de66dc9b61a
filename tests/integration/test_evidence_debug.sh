#!/bin/bash
# `muster debug` on a running job: 2 agents x 2 ranks of real PyTorch (gloo) on a server with a
# token file. With the job's credential (or the read-only observer credential) it prints the 4
# ranks' stacks and the job goes on to finish; --rank R prints one. Hostile: the job's worker
# credential (what every worker holds), another job's credential and no valid token get no
# stack; a second request within 10 s is refused (rate limit), the job unharmed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
PY="$MUSTER_SRC/tests/integration/trainers/evidence_worker.py"
start_token_server
JOB=dbg-$$
job_token "$T/job.tok" --job "$JOB"
job_token "$T/other.tok" --job "other-$$"
job_token "$T/ro.tok" --read-only
for i in 1 2; do
    agent a$i PYTHON_EXEC="$TORCH_PY" STEPS=200 PAUSE=0.1 TOKEN_OUT="$T/worker.tok" -- \
        --nnodes 2 --nproc-per-node 2 --rdzv-endpoint $EP --rdzv-id $JOB --token-file "$T/job.tok" \
        --rdzv-conf join_timeout=60 "$PY"
done
wait_for 90 grep -q '^\[rank[0-3]\]: step 5 ' "$T/a1.out" "$T/a2.out" || { show_all; fail "the job did not get to step 5"; }
wait_for 10 test -s "$T/worker.tok" || fail "rank 0 did not write its credential"
chmod 600 "$T/worker.tok"

# debug DESC TOKEN_FILE ARGS...: muster debug into $T/dbg.{out,err}, RC set
debug() {
    local tok=$2
    shift 2
    OUTF=$T/dbg.out ERRF=$T/dbg.err IT_TIMEOUT=30 mrun -u MUSTER_TOKEN -- debug \
        --rdzv-endpoint $EP --rdzv-id $JOB --token-file "$tok" "$@"
}

# the hostile ones first: none of them may spend the job's rate limit either
for t in worker other; do
    debug "$t credential" "$T/$t.tok"
    [ "$RC" != 0 ] || { cat "$T/dbg.out" >&2; fail "muster debug with the $t credential exited 0"; }
    grep -q 'File\|^rank [0-9]' "$T/dbg.out" && { cat "$T/dbg.out" >&2; fail "the $t credential got stacks"; }
    grep -q "may not read the evidence\|refused" "$T/dbg.err" || { cat "$T/dbg.err" >&2; fail "no refusal line for the $t credential"; }
done
echo "muster-job-v1:$JOB:$(printf '0%.0s' $(seq 64))" > "$T/forged.tok"
chmod 600 "$T/forged.tok"
debug "forged" "$T/forged.tok"
[ "$RC" != 0 ] || fail "a forged credential got an answer"
grep -q '^rank [0-9]' "$T/dbg.out" && fail "a forged credential got stacks"

# the job's credential: 4 ranks, each with a stack through the script
debug "job credential" "$T/job.tok"
[ "$RC" = 0 ] || { cat "$T/dbg.out" "$T/dbg.err" >&2; fail "muster debug exited $RC"; }
for r in 0 1 2 3; do
    grep -q "^rank $r (.*, local_rank [01], pid [0-9]*): " "$T/dbg.out" || { cat "$T/dbg.out" >&2; fail "no rank $r in muster debug"; }
done
[ "$(grep -c 'evidence_worker.py:[0-9]* in main' "$T/dbg.out")" -ge 4 ] \
    || { cat "$T/dbg.out" >&2; fail "muster debug did not print 4 stacks through the script"; }
grep -q "^job $JOB, round 0: 4 ranks" "$T/dbg.out" || { cat "$T/dbg.out" >&2; fail "no header line"; }
# at once again: refused (one per 10 s), nothing printed
debug "too soon" "$T/job.tok"
[ "$RC" != 0 ] || fail "a second muster debug within 10 s was answered"
grep -q "asked less than 10 s ago" "$T/dbg.err" || { cat "$T/dbg.err" >&2; fail "no rate-limit line"; }
sleep 10.5
# the observer credential, one rank
debug "observer credential" "$T/ro.tok" --rank 2
[ "$RC" = 0 ] || { cat "$T/dbg.out" "$T/dbg.err" >&2; fail "muster debug --rank 2 (observer) exited $RC"; }
grep -q "^job $JOB, round 0: 1 rank$" "$T/dbg.out" || { cat "$T/dbg.out" >&2; fail "--rank 2 printed more than one rank"; }
grep -q "^rank 2 " "$T/dbg.out" || fail "--rank 2 printed another rank"
# bad input: one line, exit 2
debug "bad rank" "$T/job.tok" --rank x
expect_eq "muster debug --rank x" 2 "$RC"
OUTF=$T/dbg.out ERRF=$T/dbg.err IT_TIMEOUT=10 mrun -- debug --rdzv-endpoint $EP
expect_eq "muster debug without --rdzv-id" 2 "$RC"
grep -q "needs --rdzv-id" "$T/dbg.err" || fail "no line for a missing --rdzv-id"

# the job was never stopped: it finishes
agents_exit 240 0 a1 a2
grep -q "restarting" "$T/a1.err" "$T/a2.err" && fail "the job restarted"
stop_server
exit 0
