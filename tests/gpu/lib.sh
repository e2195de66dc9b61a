#!/bin/bash
# Prologue shared by the GPU-host scripts (sourced, not run):
#
#   . "$(dirname "$0")/lib.sh"; gpu_init "$@" DEFAULT_OUT
#
# exits 77 on a machine without a GPU (gpu_require); sets B (the build dir, $1, default build-gpu), OUT ($2, default DEFAULT_OUT, created), SRC (the
# tree), M (muster) and FAILS; turns NVLink multicast off (it must stay off on shared hosts,
# KINDS.md; workers inherit this); log/check write OUT/summary.txt.
GPU_LIB_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# No GPU here (no nvidia-smi, or it lists none): exit 77 before anything runs, so that ctest
# counts the script skipped (tests/cases.list, label gpu) on a machine without one.
gpu_require() {
    if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        echo "$(basename "$0"): skipped: no GPU here (nvidia-smi absent or lists none)" >&2
        exit 77
    fi
}

gpu_init() {
    gpu_require
    local default_out=${*: -1} args=("${@:1:$#-1}")
    B=$(cd "${args[0]:-build-gpu}" && pwd)
    OUT=${args[1]:-$default_out}
    SRC=$GPU_LIB_SRC
    M=$B/muster
    mkdir -p "$OUT"
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    FAILS=0
}

log() { echo "$*" | tee -a "$OUT/summary.txt"; }
# check GOT EXPECTED WHAT: one PASS or FAIL line; a FAIL counts in FAILS
check() { if [ "$1" = "$2" ]; then log "PASS $3 ($1)"; else log "FAIL $3: expected $2, got $1"; FAILS=$((FAILS + 1)); fi; }
# ms START_NS -> milliseconds since START_NS (from date +%s%N)
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# pf NAME [muster preflight args...]: runs `muster preflight` as job NAME with its logs under
# OUT/logs and its output in OUT/NAME.out|err; sets rc and tm (wall ms)
pf() {
    local name=$1 t
    shift
    t=$(date +%s%N)
    timeout -k 5 150 "$M" preflight --log-dir "$OUT/logs" --rdzv-id "$name" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    rc=$?; tm=$(ms "$t")
}
