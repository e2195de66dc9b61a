#!/bin/bash
# Builds the libFuzzer targets in build-fuzz/ with clang and runs each for TIME seconds
# (default 30), FUZZ_JOBS of them at a time (default: the number of CPUs). Exits 1 when any
# target crashes, leaks, times out on an input or fails to replay a fuzz/regress/ input.
#   fuzz/run.sh [TIME] [TARGET...]      e.g. fuzz/run.sh 600 message http
# Seeds come from fuzz/corpus/<target>/ and are never modified; what the fuzzer learns goes to
# build-fuzz/corpus/<target>/ (kept between local runs), crashes to build-fuzz/artifacts/.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
time_s=${1:-30}
shift $(( $# > 0 ? 1 : 0 ))
all="message http config options endpoint hostlist slurm ckpt_step ckpt_registry ckpt_layout cred"
targets=${*:-$all}
jobs=${FUZZ_JOBS:-$(nproc)}
build=$root/build-fuzz

command -v clang >/dev/null || { echo "fuzz/run.sh: clang not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
grep -q 'add_subdirectory(fuzz)' CMakeLists.txt ||
    { echo "fuzz/run.sh: the root CMakeLists.txt does not add_subdirectory(fuzz)" >&2; exit 1; }
CC=clang cmake -S . -B "$build" -DMUSTER_FUZZ=ON -DMUSTER_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$build" --target muster_fuzz -j"$(nproc)" >"$build/build.log" 2>&1 ||
    { cat "$build/build.log" >&2; echo "fuzz/run.sh: build failed" >&2; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# One target: replay its regression inputs, then fuzz. Output goes to build-fuzz/logs/T.log.
run_one() {
    local t=$1 bin=$build/fuzz/fuzz_$1 log=$build/logs/$1.log
    mkdir -p "$build/corpus/$t" "$build/artifacts/$t" "$build/logs"
    : >"$log"
    if compgen -G "fuzz/regress/$t/*" >/dev/null; then
        "$bin" -runs=1 fuzz/regress/"$t"/* >>"$log" 2>&1 || return 1
    fi
    "$bin" -max_total_time="$time_s" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t/" "$build/corpus/$t" "fuzz/corpus/$t" >>"$log" 2>&1
}

declare -A pid_of
failed=0
for t in $targets; do
    [ -d "fuzz/corpus/$t" ] || { echo "fuzz/run.sh: unknown target $t" >&2; exit 1; }
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    run_one "$t" &
    pid_of[$t]=$!
done
for t in $targets; do
    log=$build/logs/$t.log
    if wait "${pid_of[$t]}"; then
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
        printf 'fuzz %-14s ok   %10s execs  %8s exec/s  corpus %s\n' "$t" "${execs:-?}" \
            "${speed:-?}" "$(ls "$build/corpus/$t" | wc -l)"
    else
        printf 'fuzz %-14s FAIL (log: %s)\n' "$t" "$log"
        tail -n 60 "$log"
        failed=1
    fi
done
exit $failed
