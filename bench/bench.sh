#!/bin/bash
# muster vs torchrun, side by side on this machine, in one run.
#
#   bench/bench.sh [RESULTS_FILE]
#
# Environment:
#   MUSTER_BIN      muster binary (default: <repo>/build/muster; figures are "n/a" if missing)
#   TORCHRUN        torchrun command (default: /usr/bin/torchrun; "n/a" if missing)
#   TORCHRUN_FIX    extra torchrun flags; default "--redirects 9:0 --tee 9:0", the workaround
#                   for Debian's torch 1.13 on Python 3.11, which crashes in to_map() on plain
#                   --redirects/--tee values (see examples/README.md). Set it empty for a torchrun
#                   that works without it.
#   RUNS            repetitions of the launch benchmark (default 10, at least 10 recommended)
#   RESTART_RUNS    repetitions of the restart benchmark (default 5)
#   CC              C compiler for bench/stamp.c (default cc)
#
# What it measures (all times CLOCK_MONOTONIC, by bench/stamp.c compiled into a temp dir):
#   (a) launch: wall time of `launcher --standalone, 8 workers of /bin/true` from fork of the
#       launcher to its exit (median of RUNS, after one unmeasured warm-up run each).
#       muster:   muster run --standalone --nproc-per-node 8 --no-python /bin/true
#       torchrun: torchrun --standalone --nproc_per_node 8 --no_python --monitor_interval 0.1 /bin/true
#   (b) restart: 8 workers; in attempt 0 rank 0 stamps the time and exits 1 while the other
#       ranks sleep; with max restarts 1 the launcher stops the sleepers and starts attempt 1.
#       Figure: earliest worker start of attempt 1 minus rank 0's exit stamp (median of
#       RESTART_RUNS). It includes failure detection, stopping 7 workers, re-rendezvous and the
#       fork/exec of the first new worker.
#   (c) agent memory: VmHWM (peak RSS) and VmRSS of the launcher process itself (for torchrun the
#       python process running the agent, which also hosts the c10d store in --standalone),
#       read from /proc while 8 workers sleep.
# Ratios are torchrun / muster (higher = muster better).
set -u

SRC=$(cd "$(dirname "$0")/.." && pwd)
MUSTER_BIN=${MUSTER_BIN:-$SRC/build/muster}
TORCHRUN=${TORCHRUN:-/usr/bin/torchrun}
TORCHRUN_FIX=${TORCHRUN_FIX---redirects 9:0 --tee 9:0}
RUNS=${RUNS:-10}
RESTART_RUNS=${RESTART_RUNS:-5}
OUTFILE=${1:-}
NPROC=8

. "$SRC/bench/lib.sh"
bench_init bench

STAMP=$(bench_tool stamp) || exit 1

have_muster=1 have_torchrun=1
[ -x "$MUSTER_BIN" ] || { have_muster=0; echo "bench: $MUSTER_BIN not found: muster figures are n/a" >&2; }
command -v "$TORCHRUN" >/dev/null 2>&1 || { have_torchrun=0; echo "bench: $TORCHRUN not found: torchrun figures are n/a" >&2; }

# the commands, as arrays: launcher + options; the worker command follows
# shellcheck disable=SC2206
M_BASE=(env -u PYTHON_EXEC "$MUSTER_BIN" run --standalone --nproc-per-node $NPROC)
M_NOPY=(--no-python)
# shellcheck disable=SC2206
T_BASE=("$TORCHRUN" --standalone --nproc_per_node $NPROC --monitor_interval 0.1 $TORCHRUN_FIX)
T_NOPY=(--no_python)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.1fx", a / b}'; }

# ---------------------------------------------------------------- (a) launch 8 x /bin/true
launch_once() {  # launch_once m|t [RUN] -> prints elapsed ns, or "fail"
    local r
    if [ "$1" = m ]; then
        r=$("$STAMP" time "${M_BASE[@]}" "${M_NOPY[@]}" /bin/true)
    else
        r=$("$STAMP" time "${T_BASE[@]}" "${T_NOPY[@]}" /bin/true)
    fi
    set -- $r
    if [ "${2:-1}" = 0 ]; then echo "$1"; else echo "fail(rc=${2:-?})"; fi
}

# interleave TAG N FN: N runs of `FN m|t RUN` for each launcher present, muster and torchrun
# alternating; figures go to $W/TAG.m and $W/TAG.t, failures to $W/TAG.fail.m|t and the log.
interleave() {
    local tag=$1 n=$2 fn=$3 i who v
    : > "$W/$tag.m"; : > "$W/$tag.t"
    for i in $(seq 1 "$n"); do
        for who in m t; do
            [ $who = m ] && [ $have_muster = 0 ] && continue
            [ $who = t ] && [ $have_torchrun = 0 ] && continue
            v=$($fn $who "$i")
            case "$v" in
                fail*) log "  run $i $who: $v"; echo "$v" >> "$W/$tag.fail.$who" ;;
                *) echo "$v" >> "$W/$tag.$who" ;;
            esac
        done
    done
}

log "(a) launch $NPROC x /bin/true, $RUNS runs each (interleaved)"
[ $have_muster = 1 ] && launch_once m > /dev/null
[ $have_torchrun = 1 ] && launch_once t > /dev/null
interleave a "$RUNS" launch_once
A_M=$(median < "$W/a.m"); A_T=$(median < "$W/a.t")
[ -s "$W/a.m" ] || A_M=n/a
[ -s "$W/a.t" ] || A_T=n/a
log "  muster $(ms "$A_M") ms, torchrun $(ms "$A_T") ms"

# ---------------------------------------------------------------- (b) restart latency
restart_once() {  # restart_once m|t N -> prints ns from failing exit to first start of attempt 1
    local lg="$W/restart.$1.$2" r
    : > "$lg"
    if [ "$1" = m ]; then
        r=$("$STAMP" time "${M_BASE[@]}" --max-restarts 1 "${M_NOPY[@]}" "$STAMP" worker "$lg")
    else
        r=$("$STAMP" time "${T_BASE[@]}" --max_restarts 1 "${T_NOPY[@]}" "$STAMP" worker "$lg")
    fi
    set -- $r
    if [ "${2:-1}" != 0 ]; then echo "fail(rc=${2:-?})"; return; fi
    awk -v n=$NPROC '
        $1 == "fail" && $2 == 0 {f = $4}
        $1 == "start" && $2 == 1 {c++; if (s == "" || $4 < s) s = $4}
        END {if (f == "" || c != n) print "fail(log)"; else print s - f}' "$lg"
}

log "(b) restart: failing exit -> first worker of attempt 1, $RESTART_RUNS runs each"
interleave b "$RESTART_RUNS" restart_once
B_M=$(median < "$W/b.m"); B_T=$(median < "$W/b.t")
[ -s "$W/b.m" ] || B_M=n/a
[ -s "$W/b.t" ] || B_T=n/a
log "  muster $(ms "$B_M") ms, torchrun $(ms "$B_T") ms"

# ---------------------------------------------------------------- (c) agent memory
rss_once() {  # rss_once m|t -> prints "<VmHWM kB> <VmRSS kB>"
    local d="$W/rss.$1" pid hwm rss i
    mkdir -p "$d"
    if [ "$1" = m ]; then
        env -u PYTHON_EXEC "$MUSTER_BIN" run --standalone --nproc-per-node $NPROC --no-python \
            "$STAMP" sleeper "$d" 5 > /dev/null 2>&1 &
    else
        # shellcheck disable=SC2086
        "$TORCHRUN" --standalone --nproc_per_node $NPROC --monitor_interval 0.1 $TORCHRUN_FIX \
            --no_python "$STAMP" sleeper "$d" 5 > /dev/null 2>&1 &
    fi
    pid=$!
    BG="$BG $pid"
    for i in $(seq 1 1500); do
        [ "$(find "$d" -name 'ready.*' | wc -l)" -ge $NPROC ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    sleep 0.3
    hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    wait "$pid" 2>/dev/null
    echo "${hwm:-n/a} ${rss:-n/a}"
}

log "(c) agent memory with $NPROC sleeping workers"
C_M="n/a n/a"; C_T="n/a n/a"
[ $have_muster = 1 ] && C_M=$(rss_once m)
[ $have_torchrun = 1 ] && C_T=$(rss_once t)
read -r HWM_M RSS_M <<< "$C_M"
read -r HWM_T RSS_T <<< "$C_T"
mb() { awk -v v="$1" 'BEGIN {if (v == "n/a" || v == "") print "n/a"; else printf "%.1f", v / 1024}'; }

# ---------------------------------------------------------------- report
tv=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "?")
mv=$([ $have_muster = 1 ] && "$MUSTER_BIN" --version 2>/dev/null | head -1 || echo "n/a")
{
    echo "# muster vs torchrun — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r)"
    echo "# muster: ${mv:-?} ($MUSTER_BIN); torchrun: torch $tv ($TORCHRUN $TORCHRUN_FIX)"
    echo "# runs: launch $RUNS, restart $RESTART_RUNS; medians"
    printf '%-44s %12s %12s %10s %10s\n' "metric" "muster" "torchrun" "ratio t/m" "target"
    printf '%-44s %12s %12s %10s %10s\n' "(a) launch+finish $NPROC x /bin/true [ms]" "$(ms "$A_M")" "$(ms "$A_T")" "$(ratio "$A_T" "$A_M")" "<= 10"
    printf '%-44s %12s %12s %10s %10s\n' "(b) failing exit -> restarted worker [ms]" "$(ms "$B_M")" "$(ms "$B_T")" "$(ratio "$B_T" "$B_M")" "<= 10"
    printf '%-44s %12s %12s %10s %10s\n' "(c) agent peak RSS, VmHWM [MB]" "$(mb "$HWM_M")" "$(mb "$HWM_T")" "$(ratio "$HWM_T" "$HWM_M")" "<= 3"
    printf '%-44s %12s %12s %10s %10s\n' "    agent RSS with $NPROC workers, VmRSS [MB]" "$(mb "$RSS_M")" "$(mb "$RSS_T")" "$(ratio "$RSS_T" "$RSS_M")" ""
    for who in m t; do
        [ -s "$W/a.fail.$who" ] && echo "# warning: $([ $who = m ] && echo muster || echo torchrun): $(wc -l < "$W/a.fail.$who") launch run(s) failed"
    done
    echo "# raw (a) muster ns: $(tr '\n' ' ' < "$W/a.m")"
    echo "# raw (a) torchrun ns: $(tr '\n' ' ' < "$W/a.t")"
    echo "# raw (b) muster ns: $(tr '\n' ' ' < "$W/b.m")"
    echo "# raw (b) torchrun ns: $(tr '\n' ' ' < "$W/b.t")"
} > "$W/report"
cat "$W/report"
if [ -n "$OUTFILE" ]; then
    cp "$W/report" "$OUTFILE" || exit 1
fi
exit 0
