#!/bin/bash
# HF Trainer-style training under kills: trainers/hf_style.py, 2 gloo workers, writes
# checkpoint-<step>/ straight into --output_dir every 10 steps, file by file in HF's order
# (config.json, model.safetensors, training_args.bin, optimizer.pt, scheduler.pt,
# rng_state_<rank>.pth from each rank, trainer_state.json last), deletes the oldest beyond
# --save_total_limit 2 with shutil.rmtree, and resumes only from --resume_from_checkpoint PATH.
# The user adds `--resume-arg --resume_from_checkpoint --resume-arg {}`.
#
# muster must record checkpoint-N/ once its trainer_state.json is written (not when the
# directory appears), never hand over a directory a kill left without it, and append
# `--resume_from_checkpoint <verified path>` at a restart. The killer (ckpt_trainers.sh)
# SIGKILLs workers >= 20 times, >= 5 of them while a checkpoint-N/ is being written. The job
# must exit 0 with the fault-free run's weights, bit for bit.
. "$(dirname "$0")/ckpt_trainers.sh"
trainers_init hf 2502

STEPS=200
ARGS=(--max_steps "$STEPS" --save_steps 10 --save_total_limit 2)
RESUME=(--resume-arg --resume_from_checkpoint --resume-arg '{}')

# 1. fault-free; nothing appended on a fresh start
C0="$T/ref"
run_reference --standalone --nproc-per-node 2 --checkpoint-dir "$C0" "${RESUME[@]}" \
    "$SCRIPT" --output_dir "$C0" "${ARGS[@]}"
grep -q 'Loading model from' "$T/out" && { show_output; fail "fault-free run: --resume_from_checkpoint was appended on a fresh start"; }
check_ref_recorded 'checkpoint-[0-9]+'

# 2. the same with kills
C="$T/ckpt"
run_with_kills --dir "$C" --writer-ranks 0 --write-delay-ms 30 --total "$STEPS" -- \
    --standalone --nproc-per-node 2 --checkpoint-dir "$C" "${RESUME[@]}" \
    "$SCRIPT" --output_dir "$C" "${ARGS[@]}"
explain_usage_error "run with kills"
check_faulted

# every resume is from a checkpoint-N directory, and rank 0 loaded exactly what muster announced
bad=$(resumed_paths | grep -vE "^$C/checkpoint-[0-9]+\$")
[ -z "$bad" ] || faulted_fail "resumed from something other than a checkpoint-N directory: $bad"
check_loads 's/^\[rank0\]: Loading model from \(.*\)\.$/\1/p'
finish
