#!/bin/bash
# Worker start-up under muster (the agent's TCPStore) and torchrun, side by side in one
# run on this machine:
#
#   bench/store_bench.sh [OUT_FILE]
#
# Each run starts NPROC workers of tests/integration/store_worker.py in "stamp" mode
# (init_process_group over env:// with gloo, one all_reduce: the "first step"); rank 0 exits 5
# after its first attempt's step, so --max-restarts 1 runs a second attempt. Figures (medians of
# RUNS runs, milliseconds):
#   first:   launcher start -> the last rank's first step, attempt 0
#   init:    a worker's first line (after Python started, before `import torch`) -> its step,
#            the slowest rank of attempt 0: what the store costs a worker (connect, rendezvous)
#   restart: attempt 0's failure (rank 0's exit) -> the last rank's first step of attempt 1
# Environment:
#   MUSTER_BIN   muster (default: build/muster)
#   TORCHRUN     torchrun command (default /usr/bin/torchrun; "n/a" figures when missing)
#   TORCHRUN_FIX extra torchrun flags (default "--redirects 9:0 --tee 9:0": torch 1.13's torchrun
#                crashes on Python 3.11 without them; set it empty for torch 2.x)
#   PYTHON       the Python with torch (default /usr/bin/python3); RUNS (10), NPROC (2)
# torch 1.13's torchrun --standalone lets worker rank 0 host the store
# (TORCHELASTIC_USE_AGENT_STORE=False); torch 2.x's agent hosts it. Printed as the table row
# that docs/BENCHMARKS.md records.
. "$(dirname "$0")/lib.sh"
bench_init store_bench
SRC=$(cd "$(dirname "$0")/.." && pwd)
MUSTER_BIN=${MUSTER_BIN:-$SRC/build/muster}
TORCHRUN=${TORCHRUN:-/usr/bin/torchrun}
TORCHRUN_FIX=${TORCHRUN_FIX---redirects 9:0 --tee 9:0}
PYTHON=${PYTHON:-/usr/bin/python3}
RUNS=${RUNS:-10}
NPROC=${NPROC:-2}
OUTF=${1:-/dev/stdout}
WORKER=$SRC/tests/integration/store_worker.py

# one_run KIND N: one job, its stamps in $W/KIND.N.out; prints "first init restart" in ns
one_run() {
    local kind=$1 out=$W/$1.$2.out t0
    t0=$(date +%s%N)
    if [ "$kind" = muster ]; then
        STORE_BENCH_FAIL=1 PYTHON_EXEC=$PYTHON timeout 120 "$MUSTER_BIN" run --standalone \
            --nproc-per-node "$NPROC" --max-restarts 1 "$WORKER" stamp > "$out" 2>&1
    else
        # shellcheck disable=SC2086
        STORE_BENCH_FAIL=1 timeout 120 "$TORCHRUN" --standalone --nproc_per_node "$NPROC" \
            --max_restarts 1 --monitor_interval 0.1 $TORCHRUN_FIX "$WORKER" stamp > "$out" 2>&1
    fi
    awk -v t0="$t0" '
        /stamp start_ns/ { s = $0; sub(/.*stamp /, "", s); split(s, f, " ")
            st = f[2]; step = f[4]; a = f[8]
            if (a == 0) { if (step > last0) last0 = step; if (step - st > init) init = step - st }
            else if (step > last1) last1 = step }
        /stamp fail_ns/ { s = $0; sub(/.*fail_ns /, "", s); fail = s + 0 }
        END { if (last0 && last1 && fail) print last0 - t0, init, last1 - fail; else print "n/a n/a n/a" }
    ' "$out"
}

# series KIND: RUNS runs; prints the three medians in ms
series() {
    local i
    for i in $(seq "$RUNS"); do one_run "$1" "$i"; done > "$W/$1.all"
    printf '%s %s %s\n' "$(ms "$(awk '$1 != "n/a" {print $1}' "$W/$1.all" | median)")" \
        "$(ms "$(awk '$2 != "n/a" {print $2}' "$W/$1.all" | median)")" \
        "$(ms "$(awk '$3 != "n/a" {print $3}' "$W/$1.all" | median)")"
}

log "$RUNS runs of $NPROC workers each, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
read -r m_first m_init m_restart <<< "$(series muster)"
if command -v "$TORCHRUN" > /dev/null 2>&1; then
    read -r t_first t_init t_restart <<< "$(series torchrun)"
else
    t_first=n/a t_init=n/a t_restart=n/a
fi
{
    echo "| what (median ms, $NPROC workers, $RUNS runs) | muster | torchrun |"
    echo "|---|---|---|"
    echo "| launcher start -> first step, attempt 0 | $m_first | $t_first |"
    echo "| worker start -> first step (slowest rank) | $m_init | $t_init |"
    echo "| failure -> first step of attempt 1 | $m_restart | $t_restart |"
    for k in muster torchrun; do
        if [ -f "$W/$k.all" ]; then
            echo "# raw $k ns (first init restart per run): $(tr '\n' ';' < "$W/$k.all")"
        fi
    done
} > "$OUTF"
