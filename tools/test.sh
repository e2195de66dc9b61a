#!/bin/sh
# Builds muster twice and runs every test case of tests/cases.list once (README "Set-up: two
# commands"; .ci/run runs exactly the README's line):
#
#   sh tools/test.sh [CTEST_ARGS...]        e.g. sh tools/test.sh -R 'integration\.ft_'
#
# 1. build/, the plain build (-DMUSTER_WERROR=ON), then build-asan/ configured with
#    AddressSanitizer + UndefinedBehaviorSanitizer (-DMUSTER_SANITIZE=ON: any report fails the
#    muster process under test, and with it the test);
# 2. two ctest passes, so that a sanitized case never runs beside the plain tree's heavy ones,
#    with both builds done before (a first try ran both trees in one ctest, with build-asan/
#    built at nice 19 beside the first cases: the CPU-bound PyTorch checkpoint runs took half
#    as long again, 145-160 s instead of ~100 s, and the tests 1,185 s):
#    the plain tree's cases labelled ci (tests/cases.cmake: every unit program, the san-skip
#    integration cases — packaging, the long PyTorch checkpoint runs, chaos, the connection
#    floods: why in .ci/run — Slurm, the GPU scripts and the style check), then build-asan/'s
#    (every unit program
#    again and every other integration case, under the sanitizers). Each integration case
#    runs once. A torch case takes one of two CPU slots, a heavy case both and the lock
#    muster_cpu_heavy (tests/resources.json).
# TEST_JOBS (default 3) is ctest's -j. The per-test times of the last run are in
# build*/Testing/Temporary/CTestCostData.txt (ctest also uses them to start the longest first
# next time). Both passes run even when the first fails; the exit status is non-zero if either
# failed.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)

cmake -S . -B build -DMUSTER_WERROR=ON
cmake --build build -j2
cmake -S . -B build-asan -DMUSTER_SANITIZE=ON -DMUSTER_WERROR=ON
cmake --build build-asan -j2

rc=0
ctest --test-dir build -L '^ci$' --resource-spec-file "$root/tests/resources.json" \
    --output-on-failure -j"${TEST_JOBS:-3}" "$@" || rc=$?
ctest --test-dir build-asan -L '^ci$' --resource-spec-file "$root/tests/resources.json" \
    --output-on-failure -j"${TEST_JOBS:-3}" "$@" || rc=$?
exit "$rc"
