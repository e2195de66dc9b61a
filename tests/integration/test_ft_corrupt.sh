#!/bin/bash
# A recorded checkpoint that no longer verifies is skipped with its reason and the previous one
# is used. The PyTorch example writes ckpt_3..ckpt_12 into --checkpoint-dir; then,
# between runs on the same directory, the newest is altered (bytes appended), truncated,
# deleted, or changed in place at the same size, and each following `muster run` names it as
# skipped and resumes from the newest one that still verifies. The example itself resumes from
# the older checkpoint and ends with the same parameters. A run that skipped a damaged checkpoint
# must not record the damaged file as a new version of it. (The same within one run:
# test_ft_corrupt_inrun.sh.)
. "$(dirname "$0")/ft.sh"
need_torch

C="$T/ckpt"
W="$T/w"
mkdir -p "$W"

IT_TIMEOUT=120 ft_run -- --standalone --nproc-per-node 2 --checkpoint-dir "$C" "$CKPT_PY" --steps 12 --ckpt-every 3
expect_rc "first run" 0
ref=$(params_of "$T/out")
[ -n "$ref" ] || { show_output; fail "first run: no final params"; }
expect_eq "recorded by the first run" "ckpt_3.pt ckpt_6.pt ckpt_9.pt ckpt_12.pt" "$(recorded "$T/err" | tr '\n' ' ' | sed 's/ $//')"

# 1. bytes appended to the newest: the real example resumes from ckpt_9.pt and rewrites ckpt_12.pt
corrupt_append "$C/ckpt_12.pt"
IT_TIMEOUT=120 ft_run -- --standalone --nproc-per-node 2 --checkpoint-dir "$C" "$CKPT_PY" --steps 12 --ckpt-every 3
expect_rc "run after appending to ckpt_12.pt" 0
grep -qE '^muster: checkpoint ckpt_12\.pt skipped: .+' "$T/err" || { show_output; fail "appended: no 'checkpoint ckpt_12.pt skipped: <reason>'"; }
note "appended: $(grep -m1 'ckpt_12.pt skipped' "$T/err")"
expect_eq "appended: resume lines" "0 $C/ckpt_9.pt" "$(resumes_of "$T/err")"
stdout_has "appended: example resumed" "[rank0]: resumed from $C/ckpt_9.pt at step 9"
expect_eq "final params after resuming from ckpt_9.pt" "$ref" "$(params_of "$T/out")"
# the example rewrote ckpt_12.pt bit for bit as first recorded (deterministic training), so
# muster need not record it again, but from now on it verifies: the sanity run below uses it

# The next runs only need to see what muster hands the workers: the fake worker records it.
# pick WHAT EXPECTED_NAME: a run on $C must resume from $C/EXPECTED_NAME (both ranks).
pick() {
    rm -f "$W"/resume.* "$W"/env.*
    IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --checkpoint-dir "$C" \
        --no-python "$FT_WORKER" resume "$W"
    expect_rc "$1" 0
    expect_eq "$1: resume lines" "0 $C/$2" "$(resumes_of "$T/err")"
    for r in 0 1; do
        expect_eq "$1: MUSTER_RESUME_FROM of rank $r" "$C/$2" "$(cat "$W/resume.$r.0" 2>/dev/null)"
        expect_eq "$1: MUSTER_CHECKPOINT_DIR of rank $r" "$C" "$(envval "$W/env.$r.0" MUSTER_CHECKPOINT_DIR)"
    done
}
# skipped_reason NAME: the reason in "checkpoint NAME skipped: REASON" (first such line)
skipped_reason() {
    sed -n "s/^muster: checkpoint $1 skipped: //p" "$T/err" | head -1
}

pick "sanity: nothing corrupt" ckpt_12.pt
grep -q 'skipped' "$T/err" && { show_output; fail "sanity: a verifying checkpoint was skipped"; }

# 2. truncated newest
sum12=$(reg_field "$C" ckpt_12.pt checksum)
[ -n "$sum12" ] || fail "ckpt_12.pt is not in the registry: $(cat "$C/.muster/registry.json")"
corrupt_truncate "$C/ckpt_12.pt"
pick "truncated ckpt_12.pt" ckpt_9.pt
why=$(skipped_reason 'ckpt_12\.pt')
[ -n "$why" ] || { show_output; fail "truncated: no 'checkpoint ckpt_12.pt skipped: <reason>'"; }
case "$why" in *trunc* | *size*) ;; *) fail "truncated: the reason does not say so: '$why'" ;; esac
note "truncated: $why"
# A run that skipped it must not take the damaged file as a new version of the checkpoint:
# the registry keeps the checksum recorded when it landed, and the next run skips it again.
if grep -q '^muster: checkpoint ckpt_12\.pt recorded' "$T/err"; then
    show_output
    fail "the run that skipped the truncated ckpt_12.pt recorded the damaged file as a checkpoint: $(grep '^muster: checkpoint ckpt_12\.pt recorded' "$T/err")"
fi
expect_eq "registry checksum of ckpt_12.pt after a run that skipped it" "$sum12" "$(reg_field "$C" ckpt_12.pt checksum)"
pick "a second run after truncating ckpt_12.pt" ckpt_9.pt
[ -n "$(skipped_reason 'ckpt_12\.pt')" ] || fail "second run: the truncated ckpt_12.pt is not skipped any more"

# fresh HISTORY DIR: the fake worker writes ckpt_1.pt ckpt_2.pt ckpt_3.pt into DIR (recorded)
fresh() {
    IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --checkpoint-dir "$1" \
        --no-python "$FT_WORKER" ckpt "$W" ckpt_1.pt ckpt_2.pt ckpt_3.pt
    expect_rc "fake worker writing three checkpoints into $1" 0
    expect_eq "recorded by the fake worker" "ckpt_1.pt ckpt_2.pt ckpt_3.pt" "$(recorded "$T/err" | tr '\n' ' ' | sed 's/ $//')"
}

# 3. altered in place at the same size: only the checksum can tell
C="$T/ckpt-flip"
fresh "$C"
corrupt_flip "$C/ckpt_3.pt"
pick "ckpt_3.pt altered in place" ckpt_2.pt
why=$(skipped_reason 'ckpt_3\.pt')
[ -n "$why" ] || { show_output; fail "altered: no 'checkpoint ckpt_3.pt skipped: <reason>'"; }
case "$why" in *checksum*) ;; *) fail "altered in place: the reason does not name the checksum: '$why'" ;; esac
note "altered: $why"
# two bad ones in a row: the next older one still verifies
corrupt_append "$C/ckpt_2.pt"
pick "ckpt_3.pt altered and ckpt_2.pt appended to" ckpt_1.pt
[ -n "$(skipped_reason 'ckpt_3\.pt')" ] && [ -n "$(skipped_reason 'ckpt_2\.pt')" ] \
    || { show_output; fail "two bad checkpoints: both must be reported as skipped"; }

# 4. deleted newest
C="$T/ckpt-del"
fresh "$C"
rm "$C/ckpt_3.pt"
pick "deleted ckpt_3.pt" ckpt_2.pt
why=$(skipped_reason 'ckpt_3\.pt')
case "$why" in *missing*) ;; *) show_output; fail "deleted: reason should say missing, got '$why'" ;; esac
note "deleted: $why"

assert_no_marked_left "end of test" 10
exit 0
