#!/bin/bash
# nanoGPT-style training under kills: trainers/nanogpt_style.py, 2 gloo workers, rank 0
# rewrites one file, out_dir/ckpt.pt, in place with torch.save every 10 iterations (~25 MB: a
# 2.1 M-parameter model plus AdamW state) and resumes only when given --init_from=resume, from
# out_dir/ckpt.pt. The user adds `--resume-arg --init_from=resume`, nothing else.
#
# muster must record ckpt.pt each time it is complete (closed, a torch.save zip with its end
# record), keep a last good copy in DIR/.muster/, and at a restart put that copy back when a kill
# left ckpt.pt truncated ("restored"), before the workers start; then append --init_from=resume.
# The killer (ckpt_trainers.sh) SIGKILLs workers >= 20 times, >= 5 of them while ckpt.pt is
# being written (often the re-save nanoGPT does right after resuming). The job must exit 0 with
# the fault-free run's weights, bit for bit.
. "$(dirname "$0")/ckpt_trainers.sh"
trainers_init nanogpt 2501

ITERS=200
ARGS=(--eval_interval=10 "--max_iters=$ITERS")

# 1. fault-free; --resume-arg is not appended on a fresh start
C0="$T/ref"
run_reference --standalone --nproc-per-node 2 --checkpoint-dir "$C0" --resume-arg --init_from=resume \
    "$SCRIPT" --out_dir="$C0" "${ARGS[@]}"
stdout_has "fault-free run starts from scratch" "[rank0]: Initializing a new model from scratch"
grep -q 'Resuming training' "$T/out" && { show_output; fail "fault-free run: --init_from=resume was appended on a fresh start"; }
check_ref_recorded 'ckpt\.pt'

# 2. the same with kills
C="$T/ckpt"
run_with_kills --dir "$C" --writer-ranks 0 --write-delay-ms 40 --overwrite-min 2 --total "$ITERS" -- \
    --standalone --nproc-per-node 2 --checkpoint-dir "$C" --resume-arg --init_from=resume \
    "$SCRIPT" --out_dir="$C" "${ARGS[@]}"
explain_usage_error "run with kills"
check_faulted

# every resume is from ckpt.pt, and rank 0 resumed (--init_from=resume) when muster said so
expect_eq "paths resumed from" "$C/ckpt.pt" "$(resumed_paths)"
check_loads 's/^\[rank0\]: Resuming training from \(.*\)$/\1\/ckpt.pt/p'
# a truncated ckpt.pt was put back before the restart, each time a kill had cut a rewrite of a
# complete one short (the killer saw the complete one; muster could record it)
nrestored=$(grep -c '^muster: .*restored' "$T/err")
need=$(grep -c 'overwrote a complete one' "$T/killer")
[ "$nrestored" -ge "$need" ] || faulted_fail "$need kills cut a rewrite of a complete ckpt.pt short, $nrestored 'restored' lines: the last good version was not put back each time"
note "restored: $(grep -m1 '^muster: .*restored' "$T/err")"
# the last good copy lives in DIR/.muster/
[ -n "$(find "$C/.muster" -type f -size +1M 2>/dev/null | head -1)" ] \
    || faulted_fail "no last good copy of ckpt.pt (a file over 1 MB) in $C/.muster/: $(find "$C/.muster" -printf '%P %s, ' 2>&1)"

finish
