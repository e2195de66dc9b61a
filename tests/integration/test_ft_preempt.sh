#!/bin/bash
# Pre-emption. Inside a Slurm allocation (SLURM_JOB_ID, SLURM_NNODES=1; --standalone
# keeps the rendezvous local) SIGTERM to muster is forwarded to every worker; the PyTorch example
# writes a final checkpoint, muster records it and exits 75 (requeue); a second `muster run` on
# the same directory resumes from that checkpoint and finishes. The same with --preempt-signal
# USR1 and SIGUSR1 outside Slurm. Every worker gets the signal (fake workers that trap it).
# Outside Slurm and without --preempt-signal, SIGTERM is an ordinary stop: exit 143.
. "$(dirname "$0")/ft.sh"

SLURM_ENV=(SLURM_JOB_ID=$((900000 + $$)) SLURM_NNODES=1)

# fake_case WHAT SIG EXPECTED_RC ENV/ARGS...: trap workers, signal, check every rank saw it
fake_case() {
    local what=$1 sig=$2 want=$3
    shift 3
    local W="$T/fake-$sig-$want"
    mkdir -p "$W"
    local assigns=()
    while [ "$1" != "--" ]; do assigns+=("$1"); shift; done
    shift
    mrun_bg "${FT_CLEAN_ENV[@]}" ${assigns[@]+"${assigns[@]}"} -- run --standalone --nproc-per-node 2 \
        --shutdown-timeout 10 --checkpoint-dir "$T/fake-ckpt" "$@" --no-python "$FT_WORKER" trap "$W"
    wait_for 30 files_at_least 2 "$W/ready.*" || { show_output; fail "$what: workers did not start"; }
    kill -s "$sig" "$MPID"
    wait_rc "$MPID" 30
    expect_rc "$what" "$want"
    for r in 0 1; do
        expect_eq "$what: signal seen by rank $r" "$sig" "$(cat "$W/sig.$r.0" 2>/dev/null)"
    done
    [ "$(count_files "$W"/env.*.1)" = 0 ] || fail "$what: the workers were restarted"
    assert_no_marked_left "$what: muster exited but workers remain" 0
}


fake_case "--preempt-signal USR1, SIGUSR1" USR1 75 -- --preempt-signal USR1
fake_case "no Slurm, SIGTERM" TERM 143 --
note "fake workers: every rank got the signal; exit 75 (USR1), 143 (TERM outside Slurm)"

# torch_case WHAT SIG ENV/ARGS...: the example (no periodic checkpoints within reach) is
# signalled once it is training (its heartbeat file exists: --hang-timeout 600 only serves to
# give it one, under TMPDIR); it must stop with a final checkpoint that muster records, muster
# exits 75, and a second run resumes from that checkpoint.
torch_case() {
    local what=$1 sig=$2
    shift 2
    local assigns=()
    while [ "$1" != "--" ]; do assigns+=("$1"); shift; done
    shift
    local C="$T/ckpt-$sig" TD="$T/tmp-$sig"
    mkdir -p "$TD"
    ft_run_bg TMPDIR="$TD" ${assigns[@]+"${assigns[@]}"} -- --standalone --nproc-per-node 2 \
        --shutdown-timeout 30 --hang-timeout 600 --checkpoint-dir "$C" "$@" \
        "$CKPT_PY" --steps 100000 --ckpt-every 100000 --step-sleep 0.05
    _beating() { [ -n "$(find "$TD" -name heartbeat_0_0 2>/dev/null)" ]; }
    wait_for 120 _beating || { show_output; fail "$what: training did not start (no heartbeat in $TD)"; }
    kill -s "$sig" "$MPID"
    wait_rc "$MPID" 60
    expect_rc "$what" 75
    local signum line step final
    signum=$(kill -l "$sig")
    line=$(grep -m1 '^\[rank0\]: stopping on ' "$T/out")
    [[ "$line" =~ ^\[rank0\]:\ stopping\ on\ signal\ $signum\ at\ step\ ([0-9]+):\ final\ checkpoint\ (.*)$ ]] \
        || { show_output; fail "$what: rank 0 did not stop on its own signal $signum with a final checkpoint: '$line'"; }
    step=${BASH_REMATCH[1]}
    final=${BASH_REMATCH[2]}
    [ "$step" -ge 1 ] || fail "$what: stopped at step $step"
    expect_eq "$what: final checkpoint path" "$C/ckpt_$step.pt" "$final"
    [ -f "$final" ] || fail "$what: $final does not exist"
    expect_eq "$what: checkpoints recorded (only the final one)" "ckpt_$step.pt" "$(recorded "$T/err" | tr '\n' ' ' | sed 's/ $//')"
    grep -qE "^muster: checkpoint ckpt_$step\.pt recorded \(step $step, [0-9]+ bytes, xxh3 [0-9a-f]{16}\)$" "$T/err" \
        || { show_output; fail "$what: the final checkpoint ckpt_$step.pt was not recorded"; }
    expect_eq "$what: registry" "ckpt_$step.pt" "$(reg_names "$C")"
    grep -q 'restarting' "$T/err" && { show_output; fail "$what: pre-emption restarted the workers"; }
    assert_no_marked_left "$what: muster exited but workers remain" 0
    note "$what: stopped at step $step with a final checkpoint, exit 75"

    # the next allocation
    ft_run ${assigns[@]+"${assigns[@]}"} -- --standalone --nproc-per-node 2 --checkpoint-dir "$C" \
        "$CKPT_PY" --steps $((step + 2)) --ckpt-every 5
    expect_rc "$what: the second run" 0
    expect_eq "$what: second run resumes from the final checkpoint" "0 $C/ckpt_$step.pt" "$(resumes_of "$T/err")"
    stdout_has "$what: example resumed" "[rank0]: resumed from $C/ckpt_$step.pt at step $step"
    stdout_has "$what: second run finished" "[rank0]: done: step $((step + 2)) of $((step + 2))"
}

if have_torch; then
    torch_case "--preempt-signal USR1, SIGUSR1 to muster" USR1 -- --preempt-signal USR1
fi
# Slurm last: SIGTERM means pre-emption there, also with --standalone (a one-node sbatch job)
fake_case "Slurm (--standalone), SIGTERM" TERM 75 "${SLURM_ENV[@]}" --
need_torch
torch_case "Slurm (--standalone), SIGTERM to muster" TERM "${SLURM_ENV[@]}" --

assert_no_marked_left "end of test" 10
exit 0
