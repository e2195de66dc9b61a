#!/bin/bash
# `muster run --nproc-per-gpu 3 --dry-run` with CUDA_VISIBLE_DEVICES=0,1 (no GPU needed): 6
# workers on GPUs 0,0,0,1,1,1, each its own one-rank world (RANK 0, WORLD_SIZE 1, a distinct
# MASTER_PORT), MUSTER_TASK_INDEX 0..5 of 6, MUSTER_GPU_MEM_FRACTION 0.85/3 = 0.2833; the
# shared-GPU flags' bad values are refused with one line and exit 2.
. "$(dirname "$0")/lib.sh"

mrun CUDA_VISIBLE_DEVICES=0,1 -- run --nproc-per-gpu 3 --dry-run --no-python /bin/true
expect_rc "dry run" 0
out=$T/out
grep -q '^workers=6$' "$out" || fail "not 6 workers: $(cat "$out")"
grep -q '^gpu_mem_fraction=0.8500$' "$out" || fail "F is not 0.85 by default"
vals() { awk -v k="$1" -F= '/^\[worker/ {w++} $1 == k {print $2}' "$out" | paste -sd, -; }
expect_eq "CUDA_VISIBLE_DEVICES per worker" "0,0,0,1,1,1" "$(vals CUDA_VISIBLE_DEVICES)"
expect_eq "MUSTER_TASK_INDEX" "0,1,2,3,4,5" "$(vals MUSTER_TASK_INDEX)"
expect_eq "MUSTER_TASK_COUNT" "6,6,6,6,6,6" "$(vals MUSTER_TASK_COUNT)"
expect_eq "MUSTER_GPU_MEM_FRACTION" "0.2833,0.2833,0.2833,0.2833,0.2833,0.2833" \
    "$(vals MUSTER_GPU_MEM_FRACTION)"
expect_eq "RANK" "0,0,0,0,0,0" "$(vals RANK)"
expect_eq "WORLD_SIZE" "1,1,1,1,1,1" "$(vals WORLD_SIZE)"
ports=$(vals MASTER_PORT | tr , '\n' | sort -u | wc -l)
expect_eq "distinct MASTER_PORTs" 6 "$ports"

# F and the first N GPUs
mrun CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb,GPU-cccc -- run --nproc-per-gpu 2 --nproc-per-node 2 \
    --gpu-mem-fraction 0.5 --dry-run --no-python /bin/true
expect_rc "dry run, 2 of 3 GPUs" 0
expect_eq "UUIDs as given, first 2 GPUs" "GPU-aaaa,GPU-aaaa,GPU-bbbb,GPU-bbbb" "$(vals CUDA_VISIBLE_DEVICES)"
expect_eq "F/K" "0.2500,0.2500,0.2500,0.2500" "$(vals MUSTER_GPU_MEM_FRACTION)"

bad() { # bad WHAT ARGS...: exit 2 with one line
    local what=$1
    shift
    mrun CUDA_VISIBLE_DEVICES=0 -- run "$@" --no-python /bin/true
    expect_rc "$what" 2
    [ "$(wc -l <"$T/err")" = 1 ] || fail "$what: not one line: $(cat "$T/err")"
}
bad "K = 0" --nproc-per-gpu 0
bad "F above 1" --nproc-per-gpu 2 --gpu-mem-fraction 1.5
bad "F = 0" --nproc-per-gpu 2 --gpu-mem-fraction 0
bad "--mps=maybe" --nproc-per-gpu 2 --mps=maybe
bad "--mps without --nproc-per-gpu" --mps
bad "several nodes" --nproc-per-gpu 2 --nnodes 2 --rdzv-endpoint 127.0.0.1:1 --rdzv-id x
bad "--gpu-mem junk" --nproc-per-gpu 2 --gpu-mem 12GB
bad "more GPUs than visible" --nproc-per-gpu 2 --nproc-per-node 3
bad "with --checkpoint-dir" --nproc-per-gpu 2 --checkpoint-dir "$T"
mrun CUDA_VISIBLE_DEVICES= MUSTER_NVIDIA_PROC_DIR="$T/none" -- run --nproc-per-gpu 2 --no-python /bin/true
expect_rc "no GPU" 2
grep -q "no NVIDIA GPU visible" "$T/err" || fail "no-GPU reason: $(cat "$T/err")"
