#!/bin/sh
# Line coverage of agent/ from the unit tests alone. Builds with gcc --coverage in
# build-cov (its own tree: the normal build stays untouched), runs only `ctest -L unit`, then
# asks gcov for each agent/*.c and prints one line per file, the total for agent/, and the total
# without the files being restructured elsewhere (agent.c, attempt.c, agent_ft.c, preflight.c).
#   tools/coverage.sh [-j N] [-R regex]   (-R: run only the unit tests that match)
set -eu

jobs=2
regex=""
while [ $# -gt 0 ]; do
    case "$1" in
    -j) jobs="$2"; shift 2 ;;
    -R) regex="$2"; shift 2 ;;
    *) echo "usage: $0 [-j N] [-R regex]" >&2; exit 2 ;;
    esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
bdir="$root/build-cov"
cd "$root"

cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=gcc \
    -DCMAKE_C_FLAGS="--coverage -O0" -DCMAKE_EXE_LINKER_FLAGS="--coverage" \
    -DCMAKE_C_STANDARD_LIBRARIES=-lm >/dev/null
cmake --build "$bdir" -j "$jobs" >/dev/null
# Counters from an earlier run would add to this one.
find "$bdir" -name '*.gcda' -delete
# A failing test still leaves its counters: the figures are printed, the exit status says so.
test_rc=0
if [ -n "$regex" ]; then
    ctest --test-dir "$bdir" -L unit -R "$regex" -j "$jobs" --output-on-failure || test_rc=$?
else
    ctest --test-dir "$bdir" -L unit -j "$jobs" --output-on-failure || test_rc=$?
fi

objdir="$bdir/agent/CMakeFiles/muster_agent.dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for src in agent/*.c; do
    f=$(basename "$src")
    # gcov prints "Lines executed:P% of N" for the source; with no .gcda it counts 0 of N.
    (cd "$tmp" && gcov -n -o "$objdir/$f.o" "$root/$src" 2>/dev/null) |
        awk -v f="$f" '
            /^File / { mine = index($0, "/agent/" f "'\''") > 0 }
            mine && /^Lines executed:/ {
                split($2, a, ":"); pct = a[2]; sub("%", "", pct); n = $4
                printf "%s %d %d\n", f, int(pct * n / 100 + 0.5), n; exit
            }
            /^No executable lines/ { if (mine) { printf "%s 0 0\n", f; exit } }'
done >"$tmp/lines"

awk '
    BEGIN { printf "%-14s %6s %6s %7s\n", "file", "hit", "lines", "cover" }
    {
        printf "%-14s %6d %6d %6.1f%%\n", $1, $2, $3, $3 ? 100 * $2 / $3 : 0
        hit += $2; all += $3
        if ($1 !~ /^(agent|attempt|agent_ft|preflight)\.c$/) { h2 += $2; a2 += $3 }
    }
    END {
        printf "%-14s %6d %6d %6.1f%%\n", "agent/ total", hit, all, 100 * hit / all
        printf "%-14s %6d %6d %6.1f%%  (without agent.c attempt.c agent_ft.c preflight.c)\n",
            "agent/ rest", h2, a2, 100 * h2 / a2
    }' "$tmp/lines"
if [ "$test_rc" != 0 ]; then
    echo "coverage: some unit tests failed (ctest exit $test_rc): the figures include them" >&2
    exit 1
fi
