#!/bin/bash
# torch.distributed.checkpoint-style training under kills: trainers/dcp_style.py, 2
# gloo workers; every 10 steps each rank writes its shard step-<N>/__<rank>_0.distcp straight
# into --ckpt_dir, then rank 0 writes .metadata.tmp and renames it to .metadata (as DCP's
# FileSystemWriter does), and deletes the oldest step-* beyond 2 (shutil.rmtree). It resumes from
# $MUSTER_RESUME_FROM when set: the user adds nothing to the command line.
#
# muster must record step-N/ once .metadata is there (not when the directory appears, nor with
# one shard of two), never hand over a directory a kill left without it, and name the verified
# directory in MUSTER_RESUME_FROM at a restart. The killer (ckpt_trainers.sh) SIGKILLs workers
# >= 20 times (rank 0 or rank 1: both write), >= 5 of them while a step-N/ is being written.
# The job must exit 0 with the fault-free run's weights, bit for bit.
. "$(dirname "$0")/ckpt_trainers.sh"
trainers_init dcp 2503

STEPS=200
ARGS=(--steps "$STEPS" --ckpt_every 10 --keep_latest_k 2)

# fault-free (no rank loads anything on a fresh start), then the same with kills
ref_and_killed_runs ': loaded ' 'step-[0-9]+' --writer-ranks 0,1 --write-delay-ms 15

# every resume is from a step-N directory; both ranks loaded what muster announced
bad=$(resumed_paths | grep -vE "^$C/step-[0-9]+\$")
[ -z "$bad" ] || faulted_fail "resumed from something other than a step-N directory: $bad"
check_loads 's/^\[rank0\]: rank 0: loaded \(.*\) at step [0-9]*$/\1/p'
last=$(resumes_of "$T/err" | tail -1 | cut -d' ' -f2-)
stdout_has "rank 1 loaded the last attempt's checkpoint" "[rank1]: rank 1: loaded $last at step"
finish
