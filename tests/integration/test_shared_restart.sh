#!/bin/bash
# Shared-GPU mode (--nproc-per-gpu): independent one-rank tasks. A failing task restarts alone
# (new MASTER_PORT, its own restart count) while the others run on untouched; a task out of
# restarts ends the job with its code once the others finished. No GPU is needed: the GPU ids
# come from CUDA_VISIBLE_DEVICES and nothing touches CUDA.
. "$(dirname "$0")/lib.sh"

W="$IT_DIR/mock/shared_worker.sh"

# (a) 2 GPUs x 2 = 4 tasks; task 1 fails once.
D="$T/a"; L="$T/logs"; mkdir -p "$D" "$L"
mrun CUDA_VISIBLE_DEVICES=0,1 -- run --nproc-per-gpu 2 --max-restarts 3 --log-dir "$L" \
    --no-python "$W" fail-once "$D" 1 3
expect_rc "task 1 fails once, --max-restarts 3" 0
for t in 0 2 3; do
    [ "$(wc -l < "$D/starts.$t")" = 1 ] || fail "task $t started more than once: $(cat "$D/starts.$t")"
    [ "$(wc -l < "$D/ticks.$t")" = 15 ] || fail "task $t did not run its 15 ticks undisturbed"
    [ "$(cut -d' ' -f1 "$D/ticks.$t" | sort -u | wc -l)" = 1 ] || fail "task $t changed pid"
    [ -e "$D/done.$t" ] || fail "task $t did not finish"
done
[ "$(wc -l < "$D/starts.1")" = 2 ] || fail "task 1 should start twice: $(cat "$D/starts.1")"
expect_eq "task 1 restart counts" "0 1" "$(cut -d' ' -f2 "$D/starts.1" | tr '\n' ' ' | sed 's/ $//')"
[ -e "$D/done.1" ] || fail "task 1 did not finish after its restart"
grep -qF 'task 1 (GPU 0) exited with code 3; restarting it alone (restart 1/3)' "$T/err" \
    || { show_output; fail "stderr lacks task 1's restart line"; }
[ "$(grep -c 'restarting it alone' "$T/err")" = 1 ] || fail "more than one restart: $(grep restarting "$T/err")"
# the environment: one-rank worlds, the GPU and the fraction, distinct ports
ports=""
for t in 0 1 2 3; do
    e="$D/env.$t.0"
    expect_eq "task $t CUDA_VISIBLE_DEVICES" "$((t / 2))" "$(envval "$e" CUDA_VISIBLE_DEVICES)"
    expect_eq "task $t MUSTER_TASK_INDEX" "$t" "$(envval "$e" MUSTER_TASK_INDEX)"
    expect_eq "task $t MUSTER_TASK_COUNT" 4 "$(envval "$e" MUSTER_TASK_COUNT)"
    expect_eq "task $t MUSTER_GPU_INDEX" "$((t / 2))" "$(envval "$e" MUSTER_GPU_INDEX)"
    expect_eq "task $t MUSTER_GPU_MEM_FRACTION" 0.4250 "$(envval "$e" MUSTER_GPU_MEM_FRACTION)"
    expect_eq "task $t RANK" 0 "$(envval "$e" RANK)"
    expect_eq "task $t WORLD_SIZE" 1 "$(envval "$e" WORLD_SIZE)"
    expect_eq "task $t LOCAL_WORLD_SIZE" 1 "$(envval "$e" LOCAL_WORLD_SIZE)"
    envval "$e" MUSTER_ENDPOINT > /dev/null && fail "task $t got MUSTER_ENDPOINT"
    envval "$e" CUDA_MPS_PIPE_DIRECTORY > /dev/null && fail "task $t got MPS variables without --mps"
    ports="$ports $(envval "$e" MASTER_PORT)"
done
[ "$(echo $ports | tr ' ' '\n' | sort -u | wc -l)" = 4 ] || fail "MASTER_PORTs not distinct: $ports"
p0=$(envval "$D/env.1.0" MASTER_PORT) p1=$(envval "$D/env.1.1" MASTER_PORT)
[ "$p0" != "$p1" ] || fail "task 1's restart kept MASTER_PORT $p0"
# logs: attempt = the task's restart count, local rank = the task index
run_id=$(envval "$D/env.0.0" TORCHELASTIC_RUN_ID)
for f in attempt_0/0 attempt_0/1 attempt_1/1 attempt_0/3; do
    [ -f "$L/$run_id/$f/stdout.log" ] || fail "missing $L/$run_id/$f/stdout.log"
done
[ -d "$L/$run_id/attempt_1/0" ] && fail "task 0 has an attempt_1 directory"
expect_eq "task 1's restarted error file" "$L/$run_id/attempt_1/1/error.json" \
    "$(envval "$D/env.1.1" TORCHELASTIC_ERROR_FILE)"

# (b) task 2 always fails with 7, --max-restarts 2: three starts, exit 7 after the others finished.
D="$T/b"; mkdir -p "$D"
mrun CUDA_VISIBLE_DEVICES=0,1 -- run --nproc-per-gpu 2 --max-restarts 2 \
    --no-python "$W" always "$D" 2 7
expect_rc "task 2 always exits 7" 7
[ "$(wc -l < "$D/starts.2")" = 3 ] || fail "task 2 should start 3 times: $(cat "$D/starts.2")"
for t in 0 1 3; do
    [ "$(wc -l < "$D/starts.$t")" = 1 ] || fail "task $t was restarted"
    [ -e "$D/done.$t" ] || fail "task $t did not finish although task 2 failed"
done
grep -qF 'task 2 (GPU 1) exited with code 7; no restart left (2/2)' "$T/err" \
    || { show_output; fail "stderr lacks task 2's final failure line"; }

# (c) a task killed by a signal: 128 + signal once its restarts are used up
D="$T/c"; mkdir -p "$D"
mrun CUDA_VISIBLE_DEVICES=0 -- run --nproc-per-gpu 2 --no-python /bin/sh -c \
    '[ "$MUSTER_TASK_INDEX" = 1 ] && kill -9 $$; sleep 0.3; exit 0'
expect_rc "task 1 SIGKILLed, no restarts" 137
grep -qF 'task 1 (GPU 0) exited with signal 9 (SIGKILL); no restart left (0/0)' "$T/err" \
    || { show_output; fail "stderr lacks the signal line"; }

# (d) SIGTERM to muster: forwarded to every task, exit 143, nothing left
D="$T/d"; mkdir -p "$D"
mrun_bg CUDA_VISIBLE_DEVICES=0,1 -- run --nproc-per-gpu 2 --no-python "$W" sleep "$D"
wait_for 20 files_at_least 4 "$D/up.*" || { show_output; fail "the 4 tasks did not start"; }
kill -TERM "$MPID"
wait_rc "$MPID" 20
expect_rc "SIGTERM to muster" 143
grep -q 'received SIGTERM: stopping the tasks' "$T/err" || { show_output; fail "no SIGTERM line"; }
grep -q 'restarting it alone' "$T/err" && fail "a task was restarted during the shutdown"

# (e) tasks that ignore SIGTERM: SIGKILLed after --shutdown-timeout 1; a second signal kills
# them at once (--shutdown-timeout 60)
D="$T/e"; mkdir -p "$D"
stubborn='trap "" TERM; touch "$0.$MUSTER_TASK_INDEX"; while :; do sleep 0.05; done'
mrun_bg CUDA_VISIBLE_DEVICES=0 -- run --nproc-per-gpu 2 --shutdown-timeout 1 --no-python \
    /bin/bash -c "$stubborn" "$D/up"
wait_for 20 files_at_least 2 "$D/up.*" || { show_output; fail "the stubborn tasks did not start"; }
t0=$(now_ms); kill -TERM "$MPID"; wait_rc "$MPID" 20; el=$(( $(now_ms) - t0 ))
expect_rc "SIGTERM, tasks ignore it" 143
[ "$el" -ge 900 ] && [ "$el" -lt 6000 ] || fail "SIGKILL after --shutdown-timeout 1 took ${el} ms"
D="$T/f"; mkdir -p "$D"
mrun_bg CUDA_VISIBLE_DEVICES=0 -- run --nproc-per-gpu 2 --shutdown-timeout 60 --no-python \
    /bin/bash -c "$stubborn" "$D/up"
wait_for 20 files_at_least 2 "$D/up.*" || { show_output; fail "the stubborn tasks did not start"; }
kill -TERM "$MPID"; sleep 0.3; t0=$(now_ms); kill -INT "$MPID"; wait_rc "$MPID" 20
el=$(( $(now_ms) - t0 ))
expect_rc "second signal" 143
[ "$el" -lt 5000 ] || fail "a second signal took ${el} ms to end the tasks"

# a failing task's error file (TORCHELASTIC_ERROR_FILE) is quoted in muster's line about it
cat >"$T/ef.sh" <<'SH'
#!/bin/bash
echo '{"message": {"message": "ValueError: boom in task '"$MUSTER_TASK_INDEX"'"}}' >"$TORCHELASTIC_ERROR_FILE"
[ "$MUSTER_TASK_INDEX" = 1 ] && exit 3
exit 0
SH
chmod +x "$T/ef.sh"
mrun CUDA_VISIBLE_DEVICES=0 -- run --nproc-per-gpu 2 --no-python "$T/ef.sh"
expect_rc "a task with an error file fails" 3
grep -q "task 1 (GPU 0) exited with code 3; message: ValueError: boom in task 1; no restart left" \
    "$T/err" || fail "the error file's message is not in the failure line: $(cat "$T/err")"

assert_no_marked_left "end of test" 5
exit 0
