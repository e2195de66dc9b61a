#!/bin/sh
# Builds muster twice and runs every test case of tests/cases.list once (README "Set-up: two
# commands"; .ci/run runs exactly the README's line):
#
#   sh tools/test.sh [CTEST_ARGS...]        e.g. sh tools/test.sh -R 'integration\.ft_'
#
# 1. build/, the plain build (-DMUSTER_WERROR=ON), then build-asan/ configured with
#    AddressSanitizer + UndefinedBehaviorSanitizer (-DMUSTER_SANITIZE=ON: any report fails the
#    muster process under test, and with it the test);
# 2. one ctest over both trees (build-suite/ lists them), so that one scheduler and one set of
#    CPU slots (tests/resources.json: a torch case takes one of two, a heavy case both and the
#    lock muster_cpu_heavy) cover all the cases at once: the cases labelled ci in their tree
#    (tests/cases.cmake) — every integration case once, under the sanitizers unless it is
#    san-skip (packaging, the long PyTorch checkpoint runs, chaos, the connection floods: why in
#    .ci/run), every unit program in both builds, Slurm, the GPU scripts and the style check in
#    the plain one. Tests of build-asan/ are named san.<name>; their first step, san.build,
#    builds build-asan/ at the lowest CPU priority while the plain tree's cases (mostly waiting
#    on timers and children) run beside it.
# TEST_JOBS (default 3: the build step and two cases) is ctest's -j. The per-test times of the
# last run are in build-suite/Testing/Temporary/CTestCostData.txt (ctest also uses them to start
# the longest first next time).
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)

cmake -S . -B build -DMUSTER_WERROR=ON
cmake --build build -j2
cmake -S . -B build-asan -DMUSTER_SANITIZE=ON -DMUSTER_WERROR=ON

mkdir -p build-suite
cat > build-suite/CTestTestfile.cmake <<EOT
# written by tools/test.sh
add_test(san.build nice -n 19 cmake --build "$root/build-asan" -j2)
set_tests_properties(san.build PROPERTIES FIXTURES_SETUP muster_san_built LABELS ci TIMEOUT 1800
                     COST 100000)
subdirs("$root/build")
subdirs("$root/build-asan")
EOT
exec ctest --test-dir build-suite -L '^ci$' --resource-spec-file "$root/tests/resources.json" \
    --output-on-failure -j"${TEST_JOBS:-3}" "$@"
