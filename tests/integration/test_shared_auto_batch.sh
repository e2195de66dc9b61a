#!/bin/bash
# `muster run --nproc-per-gpu K --auto-batch` (no GPU needed: nothing touches CUDA): the command
# is run once as a probe (MUSTER_PROBE_FILE, MUSTER_PROBE_BATCH=8, the first GPU, F/K), then the
# seed's rule plans the batch and every task gets MUSTER_BATCH_SIZE. With the seed's figures
# (48 GiB GPU, K=3, F=0.85, 4 GiB static, 0.04 GiB per sample) that is 192. A probe that fails
# stops the run before any task starts.
. "$(dirname "$0")/lib.sh"

cat >"$T/probe_worker.sh" <<'SH'
#!/bin/bash
if [ -n "${MUSTER_PROBE_FILE:-}" ]; then
    [ "$MOCK_PROBE_FAIL" = 1 ] && exit 9
    echo "probe batch=$MUSTER_PROBE_BATCH gpu=$CUDA_VISIBLE_DEVICES frac=$MUSTER_GPU_MEM_FRACTION" >"$OUTDIR/probe"
    # static 4 GiB; peak = static + 8 samples x 0.04 GiB
    awk -v b="$MUSTER_PROBE_BATCH" 'BEGIN { g = 1073741824; printf "{\"static_bytes\": %.0f, \"peak_bytes\": %.0f, \"batch\": %d}\n", 4*g, 4*g + b*0.04*g, b }' >"$MUSTER_PROBE_FILE"
    exit 0
fi
echo "$MUSTER_BATCH_SIZE" >"$OUTDIR/batch.$MUSTER_TASK_INDEX"
SH
chmod +x "$T/probe_worker.sh"

mkdir -p "$T/o"
mrun OUTDIR="$T/o" CUDA_VISIBLE_DEVICES=3 MOCK_PROBE_FAIL=0 -- run --nproc-per-gpu 3 --auto-batch \
    --gpu-mem 48GiB --no-python "$T/probe_worker.sh"
expect_rc "auto-batch run" 0
grep -q "probe batch=8 gpu=3 frac=0.2833" "$T/o/probe" || fail "probe environment: $(cat "$T/o/probe")"
for i in 0 1 2; do
    expect_eq "task $i MUSTER_BATCH_SIZE" 192 "$(cat "$T/o/batch.$i" 2>/dev/null)"
done
grep -q "max batch 240, MUSTER_BATCH_SIZE=192" "$T/err" || fail "no plan line: $(cat "$T/err")"

rm -f "$T/o"/*
mrun OUTDIR="$T/o" CUDA_VISIBLE_DEVICES=0 MOCK_PROBE_FAIL=1 -- run --nproc-per-gpu 2 --auto-batch \
    --gpu-mem 48GiB --no-python "$T/probe_worker.sh"
[ "$RC" != 0 ] || fail "a failed probe must fail the run"
ls "$T/o"/batch.* >/dev/null 2>&1 && fail "tasks started after a failed probe"
grep -q "probe" "$T/err" || fail "the failed probe was not reported: $(cat "$T/err")"

mrun -- run --auto-batch --no-python /bin/true
expect_rc "--auto-batch without --nproc-per-gpu" 2
