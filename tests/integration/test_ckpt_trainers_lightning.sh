#!/bin/bash
# Lightning-style training under kills: trainers/lightning_style.py, 2 gloo workers;
# every 10 steps rank 0 saves epoch=E-step=S.ckpt, removes the previous one (save_top_k=1) and
# saves last.ckpt, each as Lightning does: torch.save into memory, the bytes into a temporary
# file of $TMPDIR, shutil.move into place. $TMPDIR is put on another file system than the
# checkpoints (tmpfs), so the move copies into place: both files are written in place, last.ckpt
# over its previous version. It resumes from $MUSTER_RESUME_FROM when set (ckpt_path=): the user
# adds nothing to the command line.
#
# muster must record each .ckpt once it is complete (closed, a torch.save zip with its end
# record), never hand over one a kill cut short, keep a last good copy of last.ckpt (rewritten in
# place) and put it back at a restart when a kill left it truncated ("restored"). The killer
# (ckpt_trainers.sh) SIGKILLs workers >= 20 times, >= 5 of them while a .ckpt is being copied
# into place, >= 2 of those over a complete last.ckpt. The job must exit 0 with the fault-free
# run's weights, bit for bit.
. "$(dirname "$0")/ckpt_trainers.sh"
trainers_init lightning 2504

LT_TMP=$(other_fs_tmpdir)
[ -n "$LT_TMP" ] || skip "no writable directory on a file system other than $T's for \$TMPDIR (/dev/shm?): shutil.move would rename, not copy"
# shellcheck disable=SC2317 # called by it_cleanup
lt_cleanup() { rm -rf "$LT_TMP"; }
IT_CLEANUP_HOOKS="$IT_CLEANUP_HOOKS lt_cleanup"
note "TMPDIR=$LT_TMP ($(stat -f -c %T "$LT_TMP")), checkpoints in $T ($(stat -f -c %T "$T"))"

# shellcheck disable=SC2034 # read by run_reference and run_with_kills
RUN_ENV=(TMPDIR="$LT_TMP")
STEPS=200
ARGS=(--max_steps "$STEPS" --every_n_train_steps 10 --batches_per_epoch 50)

# fault-free (nothing restored on a fresh start), then the same with kills
ref_and_killed_runs 'Restoring states' 'epoch=[0-9]+-step=[0-9]+\.ckpt|last\.ckpt' \
    --writer-ranks 0 --write-delay-ms 5 --overwrite-min 2

bad=$(resumed_paths | grep -vE "^$C/(epoch=[0-9]+-step=[0-9]+|last)\.ckpt\$")
[ -z "$bad" ] || faulted_fail "resumed from something other than a Lightning .ckpt: $bad"
check_loads 's/^\[rank0\]: Restoring states from the checkpoint path at \(.*\)$/\1/p'
# last.ckpt cut short over a complete version (>= 2 such kills): put back before the next attempt
need=$(grep -c 'overwrote a complete one' "$T/killer")
nrestored=$(grep -c '^muster: .*restored' "$T/err")
[ "$nrestored" -ge "$need" ] || faulted_fail "$need kills cut a rewrite of a complete last.ckpt short, $nrestored 'restored' lines: the last good version was not put back each time"
note "restored: $(grep -m1 '^muster: .*restored' "$T/err")"
finish
