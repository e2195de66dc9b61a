#!/bin/bash
# What the scoped credentials cost, on this machine, in one run (docs/SECURITY.md "Who holds
# what, and what each credential can do"):
#   (1) per peer on the server: a PSK identity's key (HMAC-SHA256, per handshake) and a node
#       secret's check (SHA-256, per JOIN) — bench/credcost.c;
#   (2) `muster run --standalone --nproc-per-node 8 --no-python /bin/true`, wall time, median of
#       RUNS (default 21), runs of the two binaries alternating;
#   (3) a 64-agent rendezvous (bench/rdzv_bench.sh a, A_SIZES=64), both binaries.
#
#   BEFORE=/path/to/muster-before AFTER=/path/to/muster bench/cred_bench.sh
# BEFORE is a build of the tree before the credentials (protocol 2), AFTER one with them; build
# both the same way (e.g. -DCMAKE_BUILD_TYPE=Release).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BEFORE=${BEFORE:?BEFORE=muster binary without the credentials}
AFTER=${AFTER:-$SRC/build/muster}
RUNS=${RUNS:-21}
W=$(mktemp -d "${TMPDIR:-/tmp}/muster-credbench.XXXXXX")
trap 'rm -rf "$W"' EXIT

CREDCOST=$(dirname "$AFTER")/bench/credcost
[ -x "$CREDCOST" ] || { echo "no $CREDCOST (cmake --build $(dirname "$AFTER") --target credcost)" >&2; exit 1; }
echo "== (1) per peer"
"$CREDCOST"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
launch_ms() {
    local t0 t1
    t0=$(date +%s%N)
    "$1" run --standalone --nproc-per-node 8 --no-python /bin/true >/dev/null 2>&1 || echo fail >&2
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000))
}
echo "== (2) standalone launch, 8 x /bin/true, median of $RUNS (us)"
"$BEFORE" run --standalone --nproc-per-node 8 --no-python /bin/true >/dev/null 2>&1
"$AFTER" run --standalone --nproc-per-node 8 --no-python /bin/true >/dev/null 2>&1
for i in $(seq 1 "$RUNS"); do
    launch_ms "$BEFORE" >> "$W/before"
    launch_ms "$AFTER" >> "$W/after"
done
b=$(median < "$W/before")
a=$(median < "$W/after")
echo "before $b us, after $a us, difference $((a - b)) us"

echo "== (3) 64-agent rendezvous (rdzv_bench.sh a)"
for bin in "$BEFORE" "$AFTER"; do
    echo "-- $bin"
    MUSTER_BIN=$bin BUILD_DIR=$SRC/build A_SIZES=64 A_RUNS=${A_RUNS:-5} A_T_SIZES= \
        "$SRC/bench/rdzv_bench.sh" a 2>&1 | grep -F "(a) muster" | tail -1
done
