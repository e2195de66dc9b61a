#!/bin/bash
# --hang-timeout. (1) The fake worker's rank 1 beats 10 times and goes silent: muster
# names it hung within the timeout + 1 s of its last heartbeat (not before the timeout), SIGKILLs
# it, restarts the group, and the job finishes; rank 0, which keeps beating, is not named.
# (2) Restarts exhausted: exit 1 and the summary says hung. (3) Workers that never touch the
# heartbeat file are not watched: they outlive the timeout and exit 0. (4) The PyTorch example
# with --hang-at-step: detected, restarted, resumed from its checkpoint, finished.
. "$(dirname "$0")/ft.sh"

HT=2  # --hang-timeout in s

# (1) precise timing with the fake worker
W="$T/w1"; mkdir -p "$W"
mrun_bg "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --hang-timeout $HT --max-restarts 1 \
    --shutdown-timeout 5 --no-python "$FT_WORKER" beat "$W" 10
wait_for 30 test -f "$W/lastbeat.1.0" || { show_output; fail "rank 1 never stopped beating"; }
wait_for $((HT + 15)) grep_in "$T/err" ' hung: no heartbeat for ' || { show_output; fail "no hang reported"; }
t_hang=$(now_ms)
t_last=$(( $(cat "$W/lastbeat.1.0") / 1000000 ))
lat=$((t_hang - t_last))
wait_rc "$MPID" 30
expect_rc "hang of rank 1, --max-restarts 1" 0
line=$(grep -m1 ' hung: no heartbeat for ' "$T/err")
note "detected after $lat ms: $line"
[[ "$line" =~ ^muster:\ worker\ rank\ 1\ \(local_rank\ 1,\ pid\ [0-9]+\)\ hung:\ no\ heartbeat\ for\ ([0-9.]+)\ s\ \(--hang-timeout\ $HT(\.0)?\ s\)\;\ stopping\ the\ other\ workers$ ]] \
    || { show_output; fail "hang line not as documented: '$line'"; }
silent=${BASH_REMATCH[1]}
awk -v s="$silent" -v t=$HT 'BEGIN { exit !(s >= t && s <= t + 1) }' \
    || fail "reported silence ${silent} s outside [--hang-timeout, --hang-timeout + 1] = [$HT, $((HT + 1))]"
[ "$lat" -ge $((HT * 1000 - 100)) ] || fail "rank 1 named hung ${lat} ms after its last heartbeat, before the ${HT} s timeout"
[ "$lat" -le $((HT * 1000 + 1000)) ] || fail "hang detected ${lat} ms after the last heartbeat, more than --hang-timeout + 1 s"
grep -q 'worker rank 0 .* hung' "$T/err" && fail "rank 0 kept beating but was named hung"
grep -q 'restarting workers (restart 1/1)' "$T/err" || { show_output; fail "no restart after the hang"; }
for r in 0 1; do
    [ -f "$W/env.$r.1" ] || fail "rank $r did not run in attempt 1"
    hb0=$(envval "$W/env.$r.0" MUSTER_HEARTBEAT_FILE); hb1=$(envval "$W/env.$r.1" MUSTER_HEARTBEAT_FILE)
    [ -n "$hb0" ] && [ -n "$hb1" ] || fail "rank $r lacks MUSTER_HEARTBEAT_FILE"
done
[ "$(envval "$W/env.0.0" MUSTER_HEARTBEAT_FILE)" != "$(envval "$W/env.1.0" MUSTER_HEARTBEAT_FILE)" ] \
    || fail "ranks 0 and 1 share a heartbeat file"

# (2) no restarts left: the job fails with exit code 1 and the summary says hung
W="$T/w2"; mkdir -p "$W"
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --hang-timeout 1 \
    --shutdown-timeout 5 --no-python "$FT_WORKER" beat "$W" 3
expect_rc "hang with --max-restarts 0" 1
grep -q 'failed after 0 restart' "$T/err" || { show_output; fail "no failure summary"; }
grep -q '^muster:   message    : .*hung' "$T/err" || { show_output 40; fail "the summary does not say hung"; }

# (3) never touching the heartbeat file: output is progress; silence (no output, no CPU time)
# on every worker of the node is a hang
W="$T/w3"; mkdir -p "$W"
t0=$(now_ms)
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --hang-timeout 1 \
    --no-python "$FT_WORKER" chatty "$W" 3
el=$(( $(now_ms) - t0 ))
expect_rc "workers that never beat but print, for 3 s with --hang-timeout 1" 0
grep -q 'hung' "$T/err" && { show_output; fail "a worker that printed every 0.2 s was named hung"; }
[ "$el" -ge 2900 ] || fail "the job ended after ${el} ms, before the workers' 3 s"
[ -n "$(envval "$W/env.0.0" MUSTER_HEARTBEAT_FILE)" ] || fail "no MUSTER_HEARTBEAT_FILE with --hang-timeout"
W="$T/w3b"; mkdir -p "$W"
t0=$(now_ms)
IT_TIMEOUT=60 mrun "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 2 --hang-timeout 1 \
    --no-python "$FT_WORKER" nobeat "$W" 30
el=$(( $(now_ms) - t0 ))
expect_rc "silent workers that never beat, with --hang-timeout 1" 1
grep -q 'no progress (output, CPU time) on this node' "$T/err" || { show_output; fail "silent workers were not named hung"; }
[ "$el" -lt 20000 ] || fail "the hang of silent workers took ${el} ms to end the job"

# (4) the PyTorch example: rank 1 hangs at step 7 in attempt 0 (ckpt_6.pt is recorded)
if have_torch; then
    C="$T/ckpt"
    OUTF="$T/out4" ERRF="$T/err4" ft_run_bg -- --standalone --nproc-per-node 2 --hang-timeout $HT \
        --max-restarts 1 --shutdown-timeout 5 --checkpoint-dir "$C" \
        "$CKPT_PY" --steps 12 --ckpt-every 3 --hang-at-step 7 --fail-rank 1 --step-sleep 0.1
    wait_for 120 grep_in "$T/out4" 'injected hang at step 7' || { OUTF="$T/out4" ERRF="$T/err4" show_output; fail "example: no injected hang"; }
    t_stop=$(now_ms)
    wait_for 60 grep_in "$T/err4" ' hung: no heartbeat for ' || { OUTF="$T/out4" ERRF="$T/err4" show_output; fail "example: hang not detected"; }
    lat=$(( $(now_ms) - t_stop ))
    wait_rc "$MPID" 150
    OUTF="$T/out4" ERRF="$T/err4" expect_rc "example with a hang at step 7" 0
    note "example: hang reported ${lat} ms after the worker said it stopped beating"
    [ "$lat" -le $((HT * 1000 + 1000)) ] || fail "example: hang reported ${lat} ms after it began (> --hang-timeout + 1 s)"
    expect_eq "example: resume lines" "1 $C/ckpt_6.pt" "$(resumes_of "$T/err4")"
    stdout_has "example: resumed" "[rank1]: resumed from $C/ckpt_6.pt at step 6" "$T/out4"
    stdout_has "example: finished" "[rank0]: done: step 12 of 12, world_size 2, restart_count 1" "$T/out4"
else
    note "no torch: the PyTorch part is left out"
fi

assert_no_marked_left "end of test" 10
exit 0
