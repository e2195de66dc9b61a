#!/bin/bash
# Slurm defaults, checked with `muster run --dry-run` (nothing starts): inside an
# allocation (SLURM_JOB_ID set) absent flags default from SLURM_NNODES (--nnodes), SLURM_JOB_ID
# (--rdzv-id), the first host of the node list with port 29400 (--rdzv-endpoint) and the task's
# GPUs (--nproc-per-node: SLURM_GPUS_PER_TASK, else SLURM_STEP_GPUS, SLURM_GPUS_ON_NODE,
# SLURM_JOB_GPUS). Command-line flags and PET_* win; --standalone keeps its local endpoint; a
# malformed SLURM_NNODES is exit 2 with one line on stderr.
. "$(dirname "$0")/ft.sh"

cd "$T" || fail "cd $T"
# hdr KEY: value of KEY=... in the dry-run header
hdr() {
    awk -v k="$1=" '/^\[worker /{exit} index($0, k) == 1 {print substr($0, length(k) + 1); exit}' "$T/out"
}
# dry [VAR=VALUE...] -- ARGS...: muster run --dry-run ARGS --no-python /bin/true, clean env
dry() {
    local assigns=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do assigns+=("$1"); shift; done
    [ "${1:-}" = "--" ] && shift
    IT_TIMEOUT=20 mrun "${FT_CLEAN_ENV[@]}" -u CUDA_VISIBLE_DEVICES ${assigns[@]+"${assigns[@]}"} -- \
        run --dry-run "$@" --no-python /bin/true
}
# plan WHAT RUN_ID ENDPOINT NNODES NPROC: checks the header of the last dry run
plan() {
    expect_rc "$1" 0
    expect_eq "$1: run_id" "$2" "$(hdr run_id)"
    expect_eq "$1: rdzv_endpoint" "$3" "$(hdr rdzv_endpoint)"
    expect_eq "$1: nnodes" "$4" "$(hdr nnodes)"
    expect_eq "$1: nproc_per_node" "$5" "$(hdr nproc_per_node)"
}

JOB=(SLURM_JOB_ID=4242 SLURM_NNODES=3 'SLURM_JOB_NODELIST=gpu-a[07-09],gpu-b1')

dry "${JOB[@]}" SLURM_GPUS_PER_TASK=2 --
plan "Slurm, SLURM_GPUS_PER_TASK=2" 4242 gpu-a07:29400 3:3 2
expect_eq "world_size" 6 "$(hdr world_size)"
grep -qxF TORCHELASTIC_RUN_ID=4242 "$T/out" || fail "workers' TORCHELASTIC_RUN_ID is not the Slurm job id"

dry "${JOB[@]}" SLURM_STEP_GPUS=0,1,2 --
plan "Slurm, SLURM_STEP_GPUS=0,1,2" 4242 gpu-a07:29400 3:3 3
dry "${JOB[@]}" SLURM_GPUS_ON_NODE=4 --
plan "Slurm, SLURM_GPUS_ON_NODE=4" 4242 gpu-a07:29400 3:3 4
dry "${JOB[@]}" SLURM_JOB_GPUS=0-3,6 --
plan "Slurm, SLURM_JOB_GPUS=0-3,6" 4242 gpu-a07:29400 3:3 5
# the most specific one wins
dry "${JOB[@]}" SLURM_GPUS_PER_TASK=2 SLURM_STEP_GPUS=0,1,2 SLURM_GPUS_ON_NODE=4 --
plan "Slurm, GPUS_PER_TASK=2 beside STEP_GPUS and GPUS_ON_NODE" 4242 gpu-a07:29400 3:3 2
dry "${JOB[@]}" SLURM_GPUS_PER_TASK=a100:2 --
plan "Slurm, SLURM_GPUS_PER_TASK=a100:2" 4242 gpu-a07:29400 3:3 2

# other node lists: zero padding, the first item literal, a single host
dry SLURM_JOB_ID=7 SLURM_NNODES=5 'SLURM_JOB_NODELIST=node[01-04,07]' SLURM_GPUS_PER_TASK=1 --
plan "node[01-04,07]" 7 node01:29400 5:5 1
dry SLURM_JOB_ID=7 SLURM_NNODES=2 'SLURM_JOB_NODELIST=login1,gpu-a[1-2]' SLURM_GPUS_PER_TASK=1 --
plan "login1,gpu-a[1-2]" 7 login1:29400 2:2 1
dry SLURM_JOB_ID=7 SLURM_NNODES=1 SLURM_JOB_NODELIST=n5 SLURM_GPUS_PER_TASK=1 --
plan "single host" 7 n5:29400 1:1 1

# explicit flags win over Slurm
dry "${JOB[@]}" SLURM_GPUS_PER_TASK=2 -- --nnodes 2 --rdzv-id mine --rdzv-endpoint other:1234 --nproc-per-node 1
plan "flags over Slurm" mine other:1234 2:2 1
# and so do PET_*
dry "${JOB[@]}" SLURM_GPUS_PER_TASK=2 PET_NNODES=4 PET_RDZV_ID=pet PET_RDZV_ENDPOINT=peth:555 PET_NPROC_PER_NODE=3 --
plan "PET_* over Slurm" pet peth:555 4:4 3
# --standalone keeps a local endpoint
dry SLURM_JOB_ID=4242 SLURM_NNODES=1 'SLURM_JOB_NODELIST=gpu-a[07-09]' SLURM_GPUS_PER_TASK=2 -- --standalone
expect_rc "Slurm with --standalone" 0
case "$(hdr rdzv_endpoint)" in
gpu-a07:* | "") show_output; fail "--standalone under Slurm: endpoint '$(hdr rdzv_endpoint)'" ;;
esac
# outside an allocation nothing is taken from stray SLURM_* variables
dry SLURM_NNODES=3 'SLURM_JOB_NODELIST=gpu-a[07-09]' SLURM_GPUS_PER_TASK=2 --
expect_rc "SLURM_* without SLURM_JOB_ID" 0
expect_eq "no allocation: nnodes" 1:1 "$(hdr nnodes)"
expect_eq "no allocation: nproc_per_node" 1 "$(hdr nproc_per_node)"

# malformed SLURM_NNODES: exit 2, one line naming it, nothing on stdout
for bad in x3 0 -1 3x ''; do
    [ -z "$bad" ] && continue
    dry SLURM_JOB_ID=4242 SLURM_NNODES="$bad" SLURM_JOB_NODELIST=n1 --
    expect_rc "SLURM_NNODES=$bad" 2
    [ "$(wc -l < "$T/err")" = 1 ] || { show_output; fail "SLURM_NNODES=$bad: expected one line on stderr, got $(wc -l < "$T/err")"; }
    grep -q "SLURM_NNODES" "$T/err" || fail "SLURM_NNODES=$bad: the error does not name SLURM_NNODES: $(cat "$T/err")"
    grep -q '^muster: error: ' "$T/err" || fail "SLURM_NNODES=$bad: not a 'muster: error:' line: $(cat "$T/err")"
    [ -s "$T/out" ] && fail "SLURM_NNODES=$bad: printed a plan"
done

assert_no_marked_left "end of test" 2
exit 0
