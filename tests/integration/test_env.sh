#!/bin/bash
# Worker environment: torchrun's variables, muster's job id, inheritance, OMP_NUM_THREADS, the
# [rank<N>]: output prefix, PET_NPROC_PER_NODE and the --nproc_per_node spelling.
. "$(dirname "$0")/lib.sh"

D="$T/w4"
mkdir -p "$D"
mrun -u OMP_NUM_THREADS -u TORCH_NCCL_ASYNC_ERROR_HANDLING -u PET_NPROC_PER_NODE \
     MUSTER_IT_INHERITED=inherited-value-42 -- \
     run --standalone --nproc-per-node 4 --no-python "$WORKER" dump "$D"
expect_rc "4 workers dumping their env" 0

[ "$(count_files "$D"/env.*)" = 4 ] || fail "expected 4 env dumps, found: $(ls "$D")"
run_id="" port=""
for r in 0 1 2 3; do
    f="$D/env.$r.0"
    [ -f "$f" ] || fail "no env dump from RANK=$r (files: $(ls "$D"))"
    expect_eq "rank $r RANK" "$r" "$(envval "$f" RANK)"
    expect_eq "rank $r LOCAL_RANK" "$r" "$(envval "$f" LOCAL_RANK)"
    expect_eq "rank $r ROLE_RANK" "$r" "$(envval "$f" ROLE_RANK)"
    expect_eq "rank $r WORLD_SIZE" 4 "$(envval "$f" WORLD_SIZE)"
    expect_eq "rank $r LOCAL_WORLD_SIZE" 4 "$(envval "$f" LOCAL_WORLD_SIZE)"
    expect_eq "rank $r GROUP_RANK" 0 "$(envval "$f" GROUP_RANK)"
    expect_eq "rank $r GROUP_WORLD_SIZE" 1 "$(envval "$f" GROUP_WORLD_SIZE)"
    expect_eq "rank $r ROLE_NAME" default "$(envval "$f" ROLE_NAME)"
    expect_eq "rank $r ROLE_WORLD_SIZE" 4 "$(envval "$f" ROLE_WORLD_SIZE)"
    expect_eq "rank $r TORCHELASTIC_RESTART_COUNT" 0 "$(envval "$f" TORCHELASTIC_RESTART_COUNT)"
    expect_eq "rank $r TORCHELASTIC_MAX_RESTARTS" 0 "$(envval "$f" TORCHELASTIC_MAX_RESTARTS)"
    expect_eq "rank $r TORCHELASTIC_USE_AGENT_STORE" True "$(envval "$f" TORCHELASTIC_USE_AGENT_STORE)"
    expect_eq "rank $r TORCH_NCCL_ASYNC_ERROR_HANDLING" 1 "$(envval "$f" TORCH_NCCL_ASYNC_ERROR_HANDLING)"
    expect_eq "rank $r OMP_NUM_THREADS (unset outside, nproc 4)" 1 "$(envval "$f" OMP_NUM_THREADS)"
    expect_eq "rank $r inherited agent variable" inherited-value-42 "$(envval "$f" MUSTER_IT_INHERITED)"

    addr=$(envval "$f" MASTER_ADDR) || fail "rank $r: MASTER_ADDR not set"
    [ -n "$addr" ] || fail "rank $r: MASTER_ADDR empty"
    p=$(envval "$f" MASTER_PORT) || fail "rank $r: MASTER_PORT not set"
    [[ "$p" =~ ^[0-9]+$ ]] && [ "$p" -ge 1 ] && [ "$p" -le 65535 ] || fail "rank $r: MASTER_PORT '$p' is not a port number"
    [ -z "$port" ] && port=$p
    expect_eq "rank $r MASTER_PORT (same for all ranks)" "$port" "$p"

    rid=$(envval "$f" TORCHELASTIC_RUN_ID) || fail "rank $r: TORCHELASTIC_RUN_ID not set"
    [ -n "$rid" ] || fail "rank $r: TORCHELASTIC_RUN_ID empty"
    [ -z "$run_id" ] && run_id=$rid
    expect_eq "rank $r TORCHELASTIC_RUN_ID (same for all ranks)" "$run_id" "$rid"
    expect_eq "rank $r MUSTER_JOB_ID = TORCHELASTIC_RUN_ID" "$rid" "$(envval "$f" MUSTER_JOB_ID)"

    ef=$(envval "$f" TORCHELASTIC_ERROR_FILE) || fail "rank $r: TORCHELASTIC_ERROR_FILE not set"
    [ -n "$ef" ] || fail "rank $r: TORCHELASTIC_ERROR_FILE empty"
    # without --log-dir the error files sit flat in a private directory (the documented
    # attempt_N/LOCAL_RANK layout is for --log-dir, checked in test_logs.sh); each worker
    # has its own, in a directory that exists while the job runs
    case "$ef" in */error_0_"$r".json) ;; *) fail "rank $r: TORCHELASTIC_ERROR_FILE '$ef' is not <private dir>/error_<attempt>_<local_rank>.json" ;; esac

    # output prefix, same stream
    grep -qxF "[rank$r]: hello-from-rank-$r attempt 0" "$T/out" || { show_output; fail "stdout lacks '[rank$r]: hello-from-rank-$r attempt 0'"; }
    grep -qxF "[rank$r]: stderr-from-rank-$r attempt 0" "$T/err" || { show_output; fail "stderr lacks '[rank$r]: stderr-from-rank-$r attempt 0'"; }
done
[ "$run_id" != none ] || fail "--standalone must use a random run id, got 'none'"
if grep -v '^\[rank[0-9]\]: ' "$T/out" | grep -q 'from-rank'; then
    fail "unprefixed worker output on stdout: $(grep -v '^\[rank[0-9]\]: ' "$T/out" | grep 'from-rank' | head -3)"
fi
if grep -q 'stderr-from-rank' "$T/out"; then fail "worker stderr ended up on muster's stdout"; fi
if grep -q 'hello-from-rank' "$T/err"; then fail "worker stdout ended up on muster's stderr"; fi
assert_no_marked_left "after a successful run" 5

# OMP_NUM_THREADS set outside is kept
D="$T/omp"; mkdir -p "$D"
mrun OMP_NUM_THREADS=3 -- run --standalone --nproc-per-node 2 --no-python "$WORKER" dump "$D"
expect_rc "OMP_NUM_THREADS=3 outside" 0
expect_eq "OMP_NUM_THREADS kept from the agent" 3 "$(envval "$D/env.0.0" OMP_NUM_THREADS)"

# PET_NPROC_PER_NODE=3
D="$T/pet"; mkdir -p "$D"
mrun PET_NPROC_PER_NODE=3 -- run --standalone --no-python "$WORKER" dump "$D"
expect_rc "PET_NPROC_PER_NODE=3" 0
[ "$(count_files "$D"/env.*)" = 3 ] || fail "PET_NPROC_PER_NODE=3: expected 3 workers, found: $(ls "$D")"
expect_eq "PET_NPROC_PER_NODE=3 WORLD_SIZE" 3 "$(envval "$D/env.2.0" WORLD_SIZE)"

# underscore spelling
D="$T/us"; mkdir -p "$D"
mrun -u PET_NPROC_PER_NODE -- run --standalone --nproc_per_node 2 --max_restarts 1 --no_python "$WORKER" dump "$D"
expect_rc "--nproc_per_node 2 --max_restarts 1 --no_python" 0
[ "$(count_files "$D"/env.*)" = 2 ] || fail "--nproc_per_node 2: expected 2 workers, found: $(ls "$D")"
expect_eq "--nproc_per_node 2 WORLD_SIZE" 2 "$(envval "$D/env.1.0" WORLD_SIZE)"
expect_eq "--max_restarts 1 TORCHELASTIC_MAX_RESTARTS" 1 "$(envval "$D/env.1.0" TORCHELASTIC_MAX_RESTARTS)"

# --role
D="$T/role"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 2 --role trainer --no-python "$WORKER" dump "$D"
expect_rc "--role trainer" 0
expect_eq "--role trainer ROLE_NAME" trainer "$(envval "$D/env.1.0" ROLE_NAME)"

assert_no_marked_left "end of test" 5
exit 0
