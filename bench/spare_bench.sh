#!/bin/bash
# Hot spares: time from the loss of a node to every worker of the job running again,
# on network-namespace hosts, with a spare waiting and without one.
#
#   bench/spare_bench.sh            (root + iproute2; prints a summary on stdout)
#
# Hosts 1-3 and the server's host 4 are network namespaces on one bridge (tests/integration/
# netns.sh). A fixed-size job --nnodes 2, one `stamp hold` worker per node (bench/stamp.c: its
# first act after exec is to append "start RANK NS" to a log, so the figure excludes whatever a
# real worker does at start-up), host 1 joins first (group rank 0), host 2 second. Then host 2
# is lost, two ways:
#   kill: its agent and worker are SIGKILLed, the link stays up (the kernel closes the
#         connection: the server sees it at once);
#   cut:  its link goes down, then they are SIGKILLed (nothing reaches the server: it notices by
#         missed heartbeats, heartbeat_timeout HB s, keep_alive_interval HB/4);
# and the job recovers, two ways:
#   spare:   a `muster run --spare` agent in host 3 has been waiting since before the loss;
#   replace: no spare; a new agent is started in host 3 as soon as the survivor's worker was
#            stopped, i.e. the moment muster itself knew of the loss (the best a scheduler that
#            reacts to muster at once could do; starting it before the loss was noticed would
#            make it a spare that waits in the job's pending list).
# Figure: the later of the two round-1 worker starts minus the loss (CLOCK_MONOTONIC), and the
# survivor's SIGTERM stamp minus the loss (the server noticed and sent RESTART). Medians of RUNS.
# Without either, a fixed-size job waits for a replacement until join_timeout.
#
# Environment: MUSTER_BIN (default <repo>/build/muster), RUNS (default 5), HB heartbeat_timeout
# for the cut in s (default 0.5), KINDS (default "kill cut"), MODES (default "spare replace").
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
MUSTER_BIN=${MUSTER_BIN:-$SRC/build/muster}
RUNS=${RUNS:-5}
HB=${HB:-0.5}
if [ -z "${MUSTER_TOKEN:-}" ]; then
    MUSTER_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
fi
export MUSTER_TOKEN
. "$SRC/bench/lib.sh"
bench_init spare_bench
SUMMARY=""
summ() { SUMMARY="$SUMMARY$*"$'\n'; log "$*"; }
STAMP=$(bench_tool stamp) || exit 1
now() { "$STAMP" now; }

T=$W
MARK=""
IT_BG_PIDS=""
IT_CLEANUP_HOOKS="" # netns.sh registers ns_teardown here; bench_cleanup() calls it
wait_for() {        # wait_for TIMEOUT_S CMD...
    local end=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [ "$(date +%s)" -ge "$end" ] && return 1
        sleep 0.01
    done
}
# shellcheck source=../tests/integration/netns.sh
. "$SRC/tests/integration/netns.sh"
reason=$(ns_available) || { echo "spare_bench: skipped: $reason" >&2; exit 77; }
ns_setup 4
P=29400
ns_bg 4 srv -- "$MUSTER_BIN" server --listen "${HOST_ADDR[4]}:$P"
SRV=$MPID
wait_for 10 grep -q 'server listening on' "$W/srv.err" || { cat "$W/srv.err" >&2; exit 1; }

starts_after() { awk -v t="$2" '$1 == "start" && $3 > t' "$1" | wc -l; }

# agent K NAME JOB LOG [ARGS...]: one node of the job in host K.
agent() {
    local k=$1 name=$2 job=$3 lg=$4
    shift 4
    ns_bg "$k" "$name" -- "$MUSTER_BIN" run --nnodes 2 --nproc-per-node 1 "$@" \
        --rdzv-endpoint "${HOST_ADDR[4]}:$P" --rdzv-id "$job" --local-addr "${HOST_ADDR[$k]}" \
        --rdzv-conf "join_timeout=60,last_call_timeout=0.5,heartbeat_timeout=$HB,keep_alive_interval=$(awk -v h="$HB" 'BEGIN {print h / 4}')" \
        --max-restarts 3 --no-python "$STAMP" hold "$lg"
}

# once KIND MODE RUN: prints "TOTAL_NS STOP_NS" or "fail(WHY)".
once() {
    local kind=$1 mode=$2 r=$3 job=sb-$1-$2-$3 lg=$W/log.$1.$2.$3 t0 pids total stop
    : > "$lg"
    [ "$mode" = spare ] && agent 3 s$r "$job" "$lg" --spare
    [ "$mode" = spare ] && ! wait_for 10 grep -q 'as a spare' "$W/s$r.err" && { echo "fail(spare)"; return; }
    agent 1 a$r "$job" "$lg"
    wait_for 10 grep -q "rendezvous $job: 1/2" "$W/a$r.err" || { echo "fail(join)"; return; }
    agent 2 b$r "$job" "$lg"
    wait_for 20 bash -c "[ \$(grep -c ^start '$lg') -ge 2 ]" || { echo "fail(start)"; return; }
    sleep 1 # heartbeats flowing
    pids=$(ip netns pids "${NS_HOST[2]}")
    t0=$(now)
    [ "$kind" = cut ] && ns_cut 2
    # shellcheck disable=SC2086
    kill -9 $pids
    if [ "$mode" = replace ]; then
        wait_for 15 grep -q '^stop 0 ' "$lg" || { echo "fail(survivor not stopped)"; return; }
        agent 3 n$r "$job" "$lg"
    fi
    if ! wait_for 15 bash -c "[ \$(awk -v t=$t0 '\$1 == \"start\" && \$3 > t' '$lg' | wc -l) -ge 2 ]"; then
        echo "fail(no round 1 within 15 s)"
    else
        total=$(awk -v t="$t0" '$1 == "start" && $3 > t {if ($3 - t > m) m = $3 - t} END {print m}' "$lg")
        stop=$(awk -v t="$t0" '$1 == "stop" && $2 == 0 && $3 > t {print $3 - t; exit}' "$lg")
        echo "$total ${stop:-n/a}"
    fi
    [ "$kind" = cut ] && ns_restore 2
    for p in "${NS_BGPID[@]}"; do [ "$p" != "$SRV" ] && kill -9 "$p" 2>/dev/null; done
    for p in "${NS_BGPID[@]}"; do [ "$p" != "$SRV" ] && wait "$p" 2>/dev/null; done
    NS_BGPID=([srv]=$SRV)
}

for kind in ${KINDS:-kill cut}; do
    for mode in ${MODES:-spare replace}; do
        tot="" stp=""
        for r in $(seq 1 "$RUNS"); do
            v=$(once "$kind" "$mode" "$r")
            log "$kind/$mode run $r: $v"
            tot="$tot ${v%% *}"
            stp="$stp ${v#* }"
        done
        what="heartbeat_timeout $HB s"
        [ "$kind" = kill ] && what="connection closed"
        summ "$kind ($what), $mode: loss -> all workers running: median $(ms "$(tr ' ' '\n' <<< "$tot" | grep -E '^[0-9]+$' | median)") ms; loss -> survivor stopped: median $(ms "$(tr ' ' '\n' <<< "$stp" | grep -E '^[0-9]+$' | median)") ms; raw ns:$tot | stop ns:$stp"
    done
done
echo "=== spare_bench summary ($(date -u '+%F %H:%M UTC'), $(nproc) cores, RUNS=$RUNS, muster $MUSTER_BIN) ==="
printf '%s' "$SUMMARY"
