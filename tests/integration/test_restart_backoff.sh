#!/bin/bash
# --restart-backoff MIN:MAX: a worker that always fails, --max-restarts 3
# --restart-backoff 0.5:2: the four attempts start >= 0.4, 0.8, 1.6 s apart (0.5, 1, 2 s with
# -20 % jitter; generous upper bounds for a loaded host), each restart says when the next attempt
# starts, and the job ends with the worker's code. The same per task in shared-GPU mode, where
# one crash-looping task must not use its restarts up in milliseconds. Bad values are refused.
. "$(dirname "$0")/lib.sh"

# gaps FILE: the differences between consecutive millisecond time stamps in FILE
gaps() {
    awk 'NR > 1 { printf "%s%d", (NR > 2 ? " " : ""), $1 - prev } { prev = $1 } END { print "" }' "$1"
}

# check_gaps WHAT "GAPS" "MIN..." "MAX...": every gap within its bounds (ms)
check_gaps() {
    local what=$1 g=($2) lo=($3) hi=($4)
    [ "${#g[@]}" = "${#lo[@]}" ] || fail "$what: ${#g[@]} gaps ($2), expected ${#lo[@]}"
    for i in "${!lo[@]}"; do
        [ "${g[$i]}" -ge "${lo[$i]}" ] && [ "${g[$i]}" -le "${hi[$i]}" ] \
            || { show_output; fail "$what: gap $i is ${g[$i]} ms, expected ${lo[$i]}..${hi[$i]} (gaps: $2)"; }
    done
}

# (a) a group restart (the server holds each new round): one node, standalone
D="$T/a"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 1 --max-restarts 3 --restart-backoff 0.5:2 \
    --no-python /bin/bash -c 'date +%s%3N >> "$0/starts"; exit 3' "$D"
expect_rc "always failing worker, --max-restarts 3" 3
[ "$(wc -l < "$D/starts")" = 4 ] || { show_output; fail "expected 4 attempts: $(cat "$D/starts")"; }
check_gaps "group restart" "$(gaps "$D/starts")" "400 800 1600" "3000 3500 5000"
for a in 2 3 4; do
    grep -qE "restarting in [0-9.]+ s \(attempt $a of 4\)" "$T/err" \
        || { show_output; fail "stderr lacks 'restarting in ... (attempt $a of 4)'"; }
done

# (b) shared-GPU mode: task 1 always fails, the others run; its attempts are spaced too
D="$T/b"; mkdir -p "$D"
mrun CUDA_VISIBLE_DEVICES=0 -- run --nproc-per-gpu 2 --max-restarts 3 --restart-backoff 0.5:2 \
    --no-python /bin/bash -c \
    'date +%s%3N >> "$0/starts.$MUSTER_TASK_INDEX"; [ "$MUSTER_TASK_INDEX" = 1 ] && exit 5; sleep 1' "$D"
expect_rc "task 1 always exits 5" 5
[ "$(wc -l < "$D/starts.0")" = 1 ] || fail "task 0 was restarted: $(cat "$D/starts.0")"
[ "$(wc -l < "$D/starts.1")" = 4 ] || { show_output; fail "task 1: expected 4 attempts: $(cat "$D/starts.1")"; }
check_gaps "shared task" "$(gaps "$D/starts.1")" "400 800 1600" "3000 3500 5000"
grep -qE "task 1: restarting in [0-9.]+ s \(attempt 4 of 4\)" "$T/err" \
    || { show_output; fail "stderr lacks task 1's 'restarting in ... (attempt 4 of 4)'"; }

# (c) a signal during a task's backoff ends it at once (nothing left to stop)
D="$T/c"; mkdir -p "$D"
mrun_bg CUDA_VISIBLE_DEVICES=0 -- run --nproc-per-gpu 1 --max-restarts 3 --restart-backoff 30 \
    --no-python /bin/bash -c 'date +%s%3N >> "$0/starts"; exit 5' "$D"
wait_for 20 grep -q 'restarting in' "$T/err" || { show_output; fail "no backoff line"; }
t0=$(now_ms); kill -TERM "$MPID"; wait_rc "$MPID" 10
[ $(( $(now_ms) - t0 )) -lt 3000 ] || fail "SIGTERM during a backoff took too long"
expect_rc "SIGTERM during the backoff" 143

# (d) --dry-run shows it; bad values: one line, exit 2
mrun -- run --standalone --nproc-per-node 1 --restart-backoff 0.5:2 --dry-run --no-python /bin/true
expect_rc "--dry-run" 0
grep -qx 'restart_backoff=0.5:2 (seconds, doubling, +-20 % jitter)' "$T/out" \
    || { show_output; fail "--dry-run lacks restart_backoff"; }
for bad in 2:1 -1 x 0.5:abc 1e3 4000; do
    mrun -- run --standalone --nproc-per-node 1 --restart-backoff "$bad" --no-python /bin/true
    expect_rc "--restart-backoff $bad" 2
    [ "$(wc -l < "$T/err")" = 1 ] && grep -q -- "--restart-backoff must be MIN\[:MAX\]" "$T/err" \
        || fail "--restart-backoff $bad: expected one clear line, got: $(cat "$T/err")"
done

mrun -- run --standalone --nproc-per-node 1 --exclude-after 3:600 --dry-run --no-python /bin/true
expect_rc "--exclude-after --dry-run" 0
grep -qx 'exclude_after=3:600 (failures of one node : window in seconds)' "$T/out" \
    || { show_output; fail "--dry-run lacks exclude_after"; }
for bad in 0 33 x 2:0 2:x :5; do
    mrun -- run --standalone --nproc-per-node 1 --exclude-after "$bad" --no-python /bin/true
    expect_rc "--exclude-after $bad" 2
    [ "$(wc -l < "$T/err")" = 1 ] && grep -q -- "--exclude-after must be N\[:WINDOW\]" "$T/err" \
        || fail "--exclude-after $bad: expected one clear line, got: $(cat "$T/err")"
done

assert_no_marked_left "end of test" 5
exit 0
