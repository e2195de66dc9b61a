#!/bin/bash
# Two --standalone jobs started at the same moment on one machine both succeed, with different
# MASTER_PORTs and different rendezvous (run ids). With torch present each job is a real 2-rank
# gloo DDP run (examples/pytorch/train_ddp.py); otherwise each is a short 2-worker shell job.
. "$(dirname "$0")/lib.sh"

if have_torch; then
    kind=torch
else
    kind=shell
    note "torch not importable by $TORCH_PY: using shell workers instead of gloo DDP"
fi

for j in a b; do
    mkdir -p "$T/$j"
    if [ $kind = torch ]; then
        OUTF="$T/$j.out" ERRF="$T/$j.err" mrun_bg PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node 2 \
            "$MUSTER_SRC/examples/pytorch/train_ddp.py" --steps 20
    else
        OUTF="$T/$j.out" ERRF="$T/$j.err" mrun_bg PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node 2 \
            --no-python "$WORKER" dump "$T/$j" 1
    fi
    eval "pid_$j=\$MPID"
done
for j in a b; do
    eval "p=\$pid_$j"
    wait_rc "$p" 150
    if [ "$RC" != 0 ]; then
        OUTF="$T/$j.out" ERRF="$T/$j.err" show_output
        fail "job $j exited $RC"
    fi
done

port_of() {
    if [ $kind = torch ]; then
        sed -n 's/^\[rank0\]: rank 0\/2 .* master [^ ]*:\([0-9]*\) run_id .*/\1/p' "$T/$1.out"
    else
        envval "$T/$1/env.0.0" MASTER_PORT
    fi
}
rid_of() {
    if [ $kind = torch ]; then
        sed -n 's/^\[rank0\]: rank 0\/2 .* run_id \(.*\)$/\1/p' "$T/$1.out"
    else
        envval "$T/$1/env.0.0" TORCHELASTIC_RUN_ID
    fi
}
pa=$(port_of a); pb=$(port_of b); ra=$(rid_of a); rb=$(rid_of b)
[ -n "$pa" ] && [ -n "$pb" ] || { OUTF="$T/a.out" ERRF="$T/a.err" show_output; fail "could not read MASTER_PORT of both jobs ('$pa', '$pb')"; }
[ -n "$ra" ] && [ -n "$rb" ] || fail "could not read the run ids of both jobs ('$ra', '$rb')"
[ "$pa" != "$pb" ] || fail "both jobs got MASTER_PORT $pa"
[ "$ra" != "$rb" ] || fail "both jobs got run id $ra"
if [ $kind = torch ]; then
    for j in a b; do
        grep -q '^\[rank0\]: final loss .* params identical across ranks: True' "$T/$j.out" \
            || { OUTF="$T/$j.out" ERRF="$T/$j.err" show_output; fail "job $j: no successful final line from rank 0"; }
    done
else
    for j in a b; do
        [ -n "$(envval "$T/$j/env.0.0" MUSTER_ENDPOINT)" ] || continue
        eval "ep_$j=\$(envval \"\$T/\$j/env.0.0\" MUSTER_ENDPOINT)"
    done
    [ -n "${ep_a:-}" ] && [ "${ep_a:-}" = "${ep_b:-}" ] && fail "both jobs got MUSTER_ENDPOINT $ep_a"
fi
note "$kind jobs: MASTER_PORT $pa vs $pb, run ids $ra vs $rb"
assert_no_marked_left "end of test" 5
exit 0
