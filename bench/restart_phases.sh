#!/bin/bash
# Time from a failure to the first training step after the restart, phase by phase, muster vs
# torchrun on the same script (bench/restart_phases.py: 2 ranks, CPU, gloo, a checkpoint per
# step), in one run. Each trial: start the job, let it make KILL_AT steps, SIGKILL rank 1, and
# read the workers' own timestamps (one clock for both launchers):
#
#   to SIGTERM     the kill -> the launcher's SIGTERM reaches the surviving rank 0 (n/a when
#                  rank 0 died first of its own collective's error: torchrun polls its workers
#                  every --monitor_interval)
#   survivor gone  the kill -> rank 0 exited (on SIGTERM it exits at once)
#   relaunch       rank 0 gone -> the new attempt's interpreter runs (the launcher notices
#                  the exit, re-rendezvous, spawn; muster's pre-flight runs only in round 0)
#   framework      `import torch` + init_process_group (gloo) of the new attempt (slowest rank):
#                  _import (the first start -> the slowest import done) + _init_pg (-> the
#                  slowest init_process_group done)
#   ckpt load      torch.load of the checkpoint (slowest rank)
#   first step     the loaded state -> the first step after the restart (slowest rank)
#   total          the kill -> the first step after the restart
#
# Prints one table (medians of TRIALS in ms) and muster's goodput table of its last trial.
#
#     MUSTER_BIN=build/muster TRIALS=3 bench/restart_phases.sh
#
# Environment: TRIALS (3), KILL_AT (4 steps), STEPS (KILL_AT + 4), PY (/usr/bin/python3),
# TORCHRUN (/usr/bin/torchrun; torch 1.13 needs --redirects/--tee and underscore flags),
# TORCHRUN_MONITOR (torchrun's --monitor_interval, default its own 5 s; 0.1 shows what polling
# alone costs).
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
bench_init restart_phases
MUSTER_BIN=${MUSTER_BIN:-$SRC/build/muster}
PY=${PY:-/usr/bin/python3}
TORCHRUN=${TORCHRUN:-/usr/bin/torchrun}
TRIALS=${TRIALS:-3}
KILL_AT=${KILL_AT:-4}
STEPS=${STEPS:-$((KILL_AT + 4))}
"$PY" -c 'import torch' 2>/dev/null || { log "no torch in $PY"; exit 77; }
[ -x "$TORCHRUN" ] || { log "no $TORCHRUN"; exit 77; }

# trial LAUNCHER N: one run; appends "launcher phase ms" lines to $W/results
trial() {
    local who=$1 n=$2 d=$W/$1.$2 pid t_kill
    mkdir -p "$d/ck"
    : > "$d/events"
    local script=("$SRC/bench/restart_phases.py" "$d/events" "$d/ck" "$STEPS")
    if [ "$who" = muster ]; then
        "$MUSTER_BIN" run --standalone --nproc-per-node 2 --max-restarts 1 \
            --checkpoint-dir "$d/ck" --no-python "$PY" "${script[@]}" > "$d/out" 2> "$d/err" &
    else
        local mon=()
        [ -n "${TORCHRUN_MONITOR:-}" ] && mon=(--monitor_interval "$TORCHRUN_MONITOR")
        "$TORCHRUN" --standalone --nproc_per_node 2 --max_restarts 1 --redirects 9:0 --tee 9:0 \
            "${mon[@]}" "${script[@]}" > "$d/out" 2> "$d/err" &
    fi
    pid=$!
    BG="$BG $pid"
    for _ in $(seq 1 600); do
        grep -q "^step $KILL_AT 1 0 " "$d/events" && break
        sleep 0.05
    done
    local victim
    victim=$(awk '$1 == "start" && $2 == 1 && $3 == 0 { print $5 }' "$d/events")
    [ -n "$victim" ] || { log "$who trial $n: rank 1 never started"; cat "$d/err" >&2; return 1; }
    t_kill=$(date +%s%N)
    kill -9 "$victim"
    wait "$pid"
    echo "kill - - $t_kill" >> "$d/events"
    # "step N RANK ATTEMPT NS PID"; the others "EVENT RANK ATTEMPT NS PID"
    awk -v who="$who" -v n="$n" '
        $1 == "kill" { k = $4; next }
        $1 == "step" { if ($4 == 1 && first == "") first = $5; next }
        { t[$1 " " $2 " " $3] = $4 }
        END {
            term = t["term 0 0"]; gone = t["exit 0 0"]
            s = (t["start 0 1"] < t["start 1 1"]) ? t["start 0 1"] : t["start 1 1"]
            i = (t["init 0 1"] > t["init 1 1"]) ? t["init 0 1"] : t["init 1 1"]
            l = (t["loaded 0 1"] > t["loaded 1 1"]) ? t["loaded 0 1"] : t["loaded 1 1"]
            m = (t["imported 0 1"] > t["imported 1 1"]) ? t["imported 0 1"] : t["imported 1 1"]
            if (gone == "" || s == "" || first == "") { print who " " n " incomplete" > "/dev/stderr"; exit 1 }
            ms = 1e6
            if (term != "")
                printf "%s to_sigterm %.1f\n", who, (term - k) / ms
            printf "%s survivor_gone %.1f\n", who, (gone - k) / ms
            printf "%s relaunch %.1f\n", who, (s - gone) / ms
            printf "%s framework %.1f\n", who, (i - s) / ms
            printf "%s _import %.1f\n", who, (m - s) / ms
            printf "%s _init_pg %.1f\n", who, (i - m) / ms
            printf "%s ckpt_load %.1f\n", who, (l - i) / ms
            printf "%s first_step %.1f\n", who, (first - l) / ms
            printf "%s total %.1f\n", who, (first - k) / ms
        }' "$d/events" \
        >> "$W/results" || { cat "$d/err" >&2; return 1; }
    [ "$who" = muster ] && grep '^muster: *\(goodput\|  \)' "$d/err" | grep -A9 'goodput:' > "$W/goodput.txt"
    return 0
}

: > "$W/results"
for n in $(seq 1 "$TRIALS"); do
    for who in muster torchrun; do
        trial "$who" "$n" || log "$who trial $n failed"
    done
done
printf '%-14s %10s %10s %8s\n' phase "muster ms" "torchrun ms" "t/m"
for ph in to_sigterm survivor_gone relaunch framework _import _init_pg ckpt_load first_step total; do
    m=$(awk -v p="$ph" '$1 == "muster" && $2 == p { print $3 }' "$W/results" | median)
    t=$(awk -v p="$ph" '$1 == "torchrun" && $2 == p { print $3 }' "$W/results" | median)
    r=$(awk -v m="$m" -v t="$t" 'BEGIN { if (m + 0 > 0 && t != "n/a") printf "%.1f", t / m; else print "-" }')
    printf '%-14s %10s %10s %8s\n' "$ph" "$m" "$t" "$r"
done
echo "(medians of $TRIALS trials; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg))"
cat "$W/goodput.txt" 2>/dev/null
