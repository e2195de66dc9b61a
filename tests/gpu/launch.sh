#!/bin/bash
# Launch, restart and agent memory (launch <= 10 ms median, agent peak RSS <= 3 MB,
# beside torchrun in one run) on the GPU host, CPU only, one command from a clean tree:
#
#   tests/gpu/launch.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster built statically on the build host (the GPU host has no libuv/mbedTLS/
# jansson/xxhash) and bench/stamp.c built there (BUILD_DIR/bench/stamp, libc only):
#   cmake -S . -B build-gpuscale -DMUSTER_STATIC_DEPS=ON -DMUSTER_PREFLIGHT_GPU=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpuscale -j2 --target muster stamp
# Runs bench/bench.sh (its header says what is measured) with that muster and the host's own
# torchrun (PyTorch 2.x, which needs no --redirects/--tee workaround). Checks: every figure was
# taken; the issue's targets are reported as met or not (not a failure of the script: a target
# is a benchmark goal). Results: OUT_DIR/summary.txt and OUT_DIR/bench.txt.
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-launch
log "# muster launch bench $(date -u +%FT%TZ) on $(hostname)"
log "$(nproc) cores, $(uname -r), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"); load $(cut -d' ' -f1-3 /proc/loadavg)"

[ -x "$B/bench/stamp" ] || { log "FAIL no $B/bench/stamp (cmake --build $B --target stamp)"; exit 1; }
TORCHRUN=${TORCHRUN:-$(command -v torchrun)}
MUSTER_BIN=$M BUILD_DIR=$B TORCHRUN=$TORCHRUN TORCHRUN_FIX="" RUNS=${RUNS:-20} RESTART_RUNS=${RESTART_RUNS:-5} \
    "$SRC/bench/bench.sh" "$OUT/bench.txt" > "$OUT/bench.out" 2>&1
rc=$?
cat "$OUT/bench.out" >> "$OUT/summary.txt"
check "$rc" 0 "bench/bench.sh ran"
if grep -q 'n/a' "$OUT/bench.txt" 2>/dev/null; then
    log "FAIL a figure is n/a (see bench.out)"
    FAILS=$((FAILS + 1))
fi
log "result: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
