#!/bin/bash
# The newest checkpoint is corrupted after muster recorded it, during the run ("the
# newest is corrupted after it was recorded -> resume from the previous one"): rank 0 of the fake
# worker writes ckpt_1.pt and ckpt_2.pt atomically (each recorded), then appends bytes to
# ckpt_2.pt in place and exits 1; with --max-restarts 1 attempt 1 must resume from ckpt_1.pt.
# An in-place change of a recorded checkpoint is damage, not a new checkpoint (those are renamed
# into place), so muster must neither record it nor hand it to the workers. Then the same with a
# truncation in place, and a legitimate rewrite (a new file renamed over the name) that is used.
. "$(dirname "$0")/ft.sh"

W="$T/w"
mkdir -p "$W"

C="$T/ckpt"
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --max-restarts 1 \
    --checkpoint-dir "$C" --no-python "$FT_WORKER" corrupt-fail "$W"
expect_rc "corrupted after it was recorded, then a crash" 0
stdout_has "worker corrupted the checkpoint" "[rank0]: ft_worker corrupted ckpt_2.pt, failing"
for r in 0 1; do
    expect_eq "attempt 0 MUSTER_RESUME_FROM of rank $r" none "$(cat "$W/resume.$r.0" 2>/dev/null)"
done
n2=$(grep -c '^muster: checkpoint ckpt_2\.pt recorded' "$T/err")
if [ "$n2" != 1 ]; then
    show_output 40
    fail "ckpt_2.pt, appended to in place after it was recorded, was recorded again (recorded $n2 times): the damaged file became the checkpoint"
fi
expect_eq "resume lines" "1 $C/ckpt_1.pt" "$(resumes_of "$T/err")"
grep -qE '^muster: checkpoint ckpt_2\.pt skipped: .+' "$T/err" || { show_output; fail "ckpt_2.pt not reported as skipped"; }
for r in 0 1; do
    expect_eq "attempt 1 MUSTER_RESUME_FROM of rank $r" "$C/ckpt_1.pt" "$(cat "$W/resume.$r.1" 2>/dev/null)"
done

# A legitimate rewrite under the same name (new content renamed into place) is recorded and used.
C="$T/ckpt-rewrite"
rm -f "$W"/resume.*
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 1 --checkpoint-dir "$C" \
    --no-python "$FT_WORKER" ckpt "$W" ckpt_1.pt latest.pt
expect_rc "fake worker writing ckpt_1.pt, latest.pt" 0
sum1=$(reg_field "$C" latest.pt checksum)
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 1 --checkpoint-dir "$C" \
    --no-python "$FT_WORKER" ckpt "$W" latest.pt
expect_rc "fake worker rewriting latest.pt" 0
expect_eq "resume of the rewriting run (latest.pt has no step: sorts after ckpt_1.pt)" "0 $C/ckpt_1.pt" "$(resumes_of "$T/err")"
grep -q '^muster: checkpoint latest\.pt recorded' "$T/err" || { show_output; fail "latest.pt renamed into place again was not recorded"; }
sum2=$(reg_field "$C" latest.pt checksum)
[ -n "$sum2" ] && [ "$sum1" != "$sum2" ] || fail "registry checksum of latest.pt not updated by the rewrite ($sum1 -> $sum2)"

assert_no_marked_left "end of test" 10
exit 0
