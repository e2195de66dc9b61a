#!/bin/bash
# Prologue shared by the bench scripts (sourced, not run): a private work directory, background
# processes killed at exit, log lines named after the script, and the median/ms arithmetic.

# bench_init NAME: sets W (a fresh temp dir) and BG (pids to kill -9 at exit), installs the traps,
# raises the open-file limit (a bench opens many connections) and names log() lines NAME.
bench_init() {
    BENCH_NAME=$1
    W=$(mktemp -d "${TMPDIR:-/tmp}/muster-$1.XXXXXX")
    BG=""
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    ulimit -n "$(ulimit -Hn)" 2>/dev/null
}

# A bench that sources tests/integration/netns.sh gets its namespaces torn down here too.
bench_cleanup() {
    local p
    for p in $BG; do kill -9 "$p" 2>/dev/null; done
    [ "$(type -t ns_teardown)" = function ] && ns_teardown
    rm -rf "$W"
}

log() { echo "$BENCH_NAME: $*" >&2; }

# bench_tool NAME: the path of a C tool CMake built (bench/ or tests/peers/ of BUILD_DIR, which
# defaults to MUSTER_BIN's folder, else build/); says which target to build when it is not there.
# Use: X=$(bench_tool NAME) || exit 1
bench_tool() {
    local b=${BUILD_DIR:-$(dirname "${MUSTER_BIN:-$SRC/build/muster}")} d
    for d in bench tests/peers; do
        [ -x "$b/$d/$1" ] && { echo "$b/$d/$1"; return 0; }
    done
    echo "${BENCH_NAME:-bench}: no $1 in $b (cmake --build $b --target $1)" >&2
    return 1
}

# median < numbers -> the median, rounded to an integer; n/a for no numbers
median() { sort -n | awk '{a[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.0f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# ms NS -> NS in milliseconds with one decimal; n/a for n/a or nothing
ms() { awk -v v="$1" 'BEGIN {if (v == "n/a" || v == "") print "n/a"; else printf "%.1f", v / 1e6}'; }
