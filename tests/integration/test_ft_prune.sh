#!/bin/bash
# --keep-checkpoints: with 2, the PyTorch example's checkpoints ckpt_3..ckpt_15 are
# pruned down to exactly the two newest, each deletion logged with the verified newer one that
# allowed it, and the registry holds the same two. A corrupt newest checkpoint never costs the
# last one that verifies: with --keep-checkpoints 1 and a damaged ckpt_15.pt, a run that writes
# nothing keeps ckpt_12.pt; a run that writes ckpt_13.pt keeps ckpt_13.pt (the newest verified)
# and the following run resumes from it.
. "$(dirname "$0")/ft.sh"
need_torch

C="$T/ckpt"
W="$T/w"
mkdir -p "$W"

IT_TIMEOUT=120 ft_run -- --standalone --nproc-per-node 2 --checkpoint-dir "$C" --keep-checkpoints 2 \
    "$CKPT_PY" --steps 15 --ckpt-every 3
expect_rc "run with --keep-checkpoints 2" 0
stdout_has "run finished" "[rank0]: done: step 15 of 15"
expect_eq "recorded" "ckpt_3.pt ckpt_6.pt ckpt_9.pt ckpt_12.pt ckpt_15.pt" "$(recorded "$T/err" | tr '\n' ' ' | sed 's/ $//')"
expect_eq "checkpoints left on disk" "ckpt_12.pt ckpt_15.pt" "$(ckpts_in "$C" | tr '\n' ' ' | sed 's/ $//')"
expect_eq "registry entries (newest first)" "ckpt_15.pt ckpt_12.pt" "$(reg_names "$C" | tr '\n' ' ' | sed 's/ $//')"
# each older one pruned once, when a newer one had verified: ckpt_3 when ckpt_9 landed, ...
for p in "3 9" "6 12" "9 15"; do
    set -- $p
    grep -qxF "muster: checkpoint ckpt_$1.pt pruned (keeping 2, newest verified ckpt_$2.pt)" "$T/err" \
        || { show_output 40; fail "no 'checkpoint ckpt_$1.pt pruned (keeping 2, newest verified ckpt_$2.pt)'"; }
done
[ "$(grep -c 'pruned' "$T/err")" = 3 ] || { show_output 40; fail "expected 3 pruned lines"; }
# never fewer than... the pruning order: ckpt_3 goes only after ckpt_9 was recorded
l_rec9=$(grep -n '^muster: checkpoint ckpt_9\.pt recorded' "$T/err" | cut -d: -f1)
l_pr3=$(grep -n '^muster: checkpoint ckpt_3\.pt pruned' "$T/err" | cut -d: -f1)
[ "$l_pr3" -gt "$l_rec9" ] || fail "ckpt_3.pt was pruned before ckpt_9.pt was recorded"

# A damaged newest checkpoint, then --keep-checkpoints 1 (fewer than are left)
corrupt_append "$C/ckpt_15.pt"
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --checkpoint-dir "$C" \
    --keep-checkpoints 1 --no-python "$FT_WORKER" resume "$W"
expect_rc "--keep-checkpoints 1, damaged ckpt_15.pt, nothing written" 0
expect_eq "resume past the damaged ckpt_15.pt" "0 $C/ckpt_12.pt" "$(resumes_of "$T/err")"
[ -f "$C/ckpt_12.pt" ] || { show_output; fail "ckpt_12.pt, the only checkpoint that verifies, was deleted"; }
grep -q 'ckpt_12\.pt pruned' "$T/err" && { show_output; fail "ckpt_12.pt pruned behind a damaged checkpoint"; }

# the worker (resumed from ckpt_12.pt) writes ckpt_13.pt: the newest verified is now ckpt_13.pt,
# ckpt_12.pt may go; the damaged ckpt_15.pt is newer than it and is not pruned (nor trusted)
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --checkpoint-dir "$C" \
    --keep-checkpoints 1 --no-python "$FT_WORKER" ckpt "$W" ckpt_13.pt
expect_rc "--keep-checkpoints 1, damaged ckpt_15.pt, the worker writes ckpt_13.pt" 0
[ -f "$C/ckpt_13.pt" ] || { show_output 40; fail "ckpt_13.pt, the newest checkpoint that verifies, was deleted"; }
grep -qxF "muster: checkpoint ckpt_12.pt pruned (keeping 1, newest verified ckpt_13.pt)" "$T/err" \
    || { show_output 40; fail "no 'checkpoint ckpt_12.pt pruned (keeping 1, newest verified ckpt_13.pt)'"; }
grep -q 'ckpt_13\.pt pruned' "$T/err" && { show_output; fail "ckpt_13.pt pruned"; }
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --checkpoint-dir "$C" \
    --keep-checkpoints 1 --no-python "$FT_WORKER" resume "$W"
expect_rc "run after the pruning" 0
expect_eq "resume after the pruning" "0 $C/ckpt_13.pt" "$(resumes_of "$T/err")"
for r in 0 1; do
    expect_eq "MUSTER_RESUME_FROM of rank $r" "$C/ckpt_13.pt" "$(cat "$W/resume.$r.0")"
done

assert_no_marked_left "end of test" 10
exit 0
