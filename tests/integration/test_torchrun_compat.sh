#!/bin/bash
# pytorch's own launcher tests (test/distributed/launcher/test_run.py, ElasticLaunchTest) as
# `muster run` command lines, single node. Each case names the test it mirrors and gives muster
# the same flags in the same spelling (--monitor-interval=1 --start-method=spawn included); the
# workers are small scripts under torchrun_compat/ in the roles of pytorch's bin/test_script*.
# The cases whose workers import torch are in test_torchrun_compat_torch.sh, the multi-agent
# ones (--nnodes MIN:MAX with an endpoint) in test_torchrun_compat_multi.sh.
# No muster-only flag and no token are given: a torchrun command line must work as written.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/torchrun_compat/common.sh"

# --- test_launch_user_script_python --------------------------------------------------------
RUN=$(new_run_id)
newdir user_py
mrun -- run --nnodes=1 --nproc-per-node=4 --rdzv-id="$RUN" --monitor-interval=1 \
    --start-method=spawn "$TC/touch_rank.py" --touch-file-dir="$D"
expect_rc "test_launch_user_script_python" 0
expect_touched "test_launch_user_script_python" "$D" 4
for r in 0 1 2 3; do
    expect_out "test_launch_user_script_python rank $r" "^\[rank$r\]: Success, created $D/$r\$"
    expect_out "test_launch_user_script_python: sentinel of the parent" "^\[rank$r\]: TEST_SENTINEL_PARENT = FOOBAR\$"
    expect_out "test_launch_user_script_python: run id" "^\[rank$r\]: TORCHELASTIC_RUN_ID = $RUN\$"
    expect_out "test_launch_user_script_python: WORLD_SIZE" "^\[rank$r\]: WORLD_SIZE = 4\$"
    expect_out "test_launch_user_script_python: LOCAL_RANK" "^\[rank$r\]: LOCAL_RANK = $r\$"
    # torchrun: OMP_NUM_THREADS=1 when unset and more than one worker
    expect_out "test_launch_user_script_python: OMP_NUM_THREADS" "^\[rank$r\]: OMP_NUM_THREADS = 1\$"
    expect_out "test_launch_user_script_python: TORCHELASTIC_MAX_RESTARTS" "^\[rank$r\]: TORCHELASTIC_MAX_RESTARTS = 0\$"
    expect_out "test_launch_user_script_python: ROLE_NAME" "^\[rank$r\]: ROLE_NAME = default\$"
    expect_out "test_launch_user_script_python: ROLE_RANK" "^\[rank$r\]: ROLE_RANK = $r\$"
    expect_out "test_launch_user_script_python: GROUP_RANK" "^\[rank$r\]: GROUP_RANK = 0\$"
    expect_out "test_launch_user_script_python: LOCAL_WORLD_SIZE" "^\[rank$r\]: LOCAL_WORLD_SIZE = 4\$"
    expect_out "test_launch_user_script_python: ROLE_WORLD_SIZE" "^\[rank$r\]: ROLE_WORLD_SIZE = 4\$"
    expect_out "test_launch_user_script_python: TORCHELASTIC_RESTART_COUNT" "^\[rank$r\]: TORCHELASTIC_RESTART_COUNT = 0\$"
done

# --- test_launch_user_script_python_caffe2_bc: --master-addr/--master-port/--node-rank ------
newdir caffe2_bc
MPORT=$(free_tcp_port)
mrun -- run --nnodes=1 --nproc-per-node=4 --monitor-interval=1 --start-method=spawn \
    --master-addr=localhost --master-port="$MPORT" --node-rank=0 \
    "$TC/touch_rank.py" --touch-file-dir="$D"
expect_rc "test_launch_user_script_python_caffe2_bc" 0
expect_touched "test_launch_user_script_python_caffe2_bc" "$D" 4
# torchrun's static backend gives the workers --master-addr and --master-port as written
expect_out "caffe2_bc: MASTER_ADDR" "^\[rank3\]: MASTER_ADDR = localhost\$"
expect_out "caffe2_bc: MASTER_PORT" "^\[rank3\]: MASTER_PORT = $MPORT\$"

# --- test_launch_user_script_bash: --no-python, and --no-python with --module refused -------
RUN=$(new_run_id)
newdir user_bash
ARGS=(--nnodes=1 --nproc-per-node=4 --rdzv-id="$RUN" --monitor-interval=1 --start-method=spawn
      --no-python)
mrun -- run "${ARGS[@]}" --module "$TC/touch_rank.sh" "$D"
expect_usage_error "test_launch_user_script_bash: --no-python with --module (ValueError)"
expect_touched "test_launch_user_script_bash: refused run started no worker" "$D" 0
mrun -- run "${ARGS[@]}" "$TC/touch_rank.sh" "$D"
expect_rc "test_launch_user_script_bash" 0
expect_touched "test_launch_user_script_bash" "$D" 4
for r in 0 1 2 3; do
    expect_out "test_launch_user_script_bash rank $r" "^\[rank$r\]: creating $D/$r\$"
done

# --- test_launch_user_script_default_nproc: no --nproc-per-node is one worker --------------
RUN=$(new_run_id)
newdir default_nproc
ARGS=(--nnodes=1 --rdzv-id="$RUN" --monitor-interval=1 --start-method=spawn --no-python)
mrun -- run "${ARGS[@]}" --module "$TC/touch_rank.sh" "$D"
expect_usage_error "test_launch_user_script_default_nproc: --no-python with --module"
mrun -- run "${ARGS[@]}" "$TC/touch_rank.sh" "$D"
expect_rc "test_launch_user_script_default_nproc" 0
expect_touched "test_launch_user_script_default_nproc" "$D" 1

# --- test_launch_with_env_vars: PET_* instead of flags --------------------------------------
RUN=$(new_run_id)
newdir env_vars
PET=(PET_NNODES=1 PET_NPROC_PER_NODE=4 PET_RDZV_ID="$RUN" PET_MONITOR_INTERVAL=1
     PET_START_METHOD=spawn PET_NO_PYTHON=1)
mrun "${PET[@]}" PET_MODULE=1 -- run "$TC/touch_rank.sh" "$D"
expect_usage_error "test_launch_with_env_vars: PET_NO_PYTHON=1 with PET_MODULE=1"
mrun "${PET[@]}" PET_MODULE=0 -- run "$TC/touch_rank.sh" "$D"
expect_rc "test_launch_with_env_vars (PET_MODULE=0)" 0
expect_touched "test_launch_with_env_vars" "$D" 4

# --- _test_nproc_launch_configuration: auto (no accelerator) = CPU count, a number, unknown ---
# test_nproc_launch_auto_configurations
ncpu=$("$TORCH_PY" -c 'import os; print(os.cpu_count())')
RUN=$(new_run_id)
newdir nproc_auto
mrun -- run --nnodes=1 --nproc-per-node=auto --rdzv-id="$RUN" --monitor-interval=1 \
    --start-method=spawn --no-python "$TC/touch_rank.sh" "$D"
expect_rc "test_nproc_launch_auto_configurations" 0
expect_touched "test_nproc_launch_auto_configurations (os.cpu_count() = $ncpu)" "$D" "$ncpu"
# test_nproc_launch_number_configurations
RUN=$(new_run_id)
newdir nproc_4
mrun -- run --nnodes=1 --nproc-per-node=4 --rdzv-id="$RUN" --monitor-interval=1 \
    --start-method=spawn --no-python "$TC/touch_rank.sh" "$D"
expect_rc "test_nproc_launch_number_configurations" 0
expect_touched "test_nproc_launch_number_configurations" "$D" 4
# test_nproc_launch_unknown_configurations (ValueError)
newdir nproc_unknown
mrun -- run --nnodes=1 --nproc-per-node=unknown --rdzv-id="$RUN" --monitor-interval=1 \
    --start-method=spawn --no-python "$TC/touch_rank.sh" "$D"
expect_usage_error "test_nproc_launch_unknown_configurations"
expect_touched "test_nproc_launch_unknown_configurations: no worker" "$D" 0

# --- test_nproc_gpu_launch_configurations: 3 GPUs (faked through the driver's /proc dir,
# where pytorch mocks torch.cuda.device_count; the stand-in muster-preflight passes for 3 GPUs)
# -> auto and gpu both start 3 workers -------------------------------------------------------
FAKE=$T/gpus3
mkdir -p "$FAKE/0000:10:00.0" "$FAKE/0000:11:00.0" "$FAKE/0000:12:00.0"
for spec in auto gpu; do
    RUN=$(new_run_id)
    newdir "nproc_gpu_$spec"
    mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MOCK_NGPUS=3 MUSTER_PREFLIGHT_BIN="$MUSTER_SRC/tests/integration/mock/muster-preflight" -- \
        run --nnodes=1 --nproc-per-node=$spec --rdzv-id="$RUN" --monitor-interval=1 \
        --start-method=spawn --no-python "$TC/touch_rank.sh" "$D"
    expect_rc "test_nproc_gpu_launch_configurations ($spec, 3 GPUs)" 0
    expect_touched "test_nproc_gpu_launch_configurations ($spec, 3 GPUs)" "$D" 3
done
# ... and gpu where there is none is an error (torchrun: ValueError "Cuda is not available")
newdir nproc_gpu_none
mrun -- run --nnodes=1 --nproc-per-node=gpu --monitor-interval=1 --start-method=spawn \
    --no-python "$TC/touch_rank.sh" "$D"
expect_usage_error "--nproc-per-node=gpu without a GPU"
expect_touched "--nproc-per-node=gpu without a GPU: no worker" "$D" 0
# test_nproc_xpu_launch_configurations: no XPU here (muster knows none), so xpu is an error as
# in torchrun without one (ValueError "Xpu is not available")
mrun -- run --nnodes=1 --nproc-per-node=xpu --monitor-interval=1 --start-method=spawn \
    --no-python "$TC/touch_rank.sh" "$D"
expect_usage_error "--nproc-per-node=xpu without an XPU"
expect_touched "--nproc-per-node=xpu without an XPU: no worker" "$D" 0

# --- test_launch_standalone ----------------------------------------------------------------
newdir standalone
mrun -- run --nnodes=1 --nproc-per-node=4 --standalone --monitor-interval=1 \
    --start-method=spawn "$TC/touch_rank.py" --touch-file-dir="$D"
expect_rc "test_launch_standalone" 0
expect_touched "test_launch_standalone" "$D" 4

# --- test_launch_run_path ------------------------------------------------------------------
newdir run_path
mrun -- run --run-path --nnodes=1 --nproc-per-node=4 --monitor-interval=1 \
    --start-method=spawn "$TC/touch_rank.py" --touch-file-dir="$D"
expect_rc "test_launch_run_path" 0
expect_touched "test_launch_run_path" "$D" 4

# --- test_min_max_nodes_parse: "1" and "2:20" parse, "2:20:30" does not (RuntimeError) ------
mrun -- run --dry-run --nnodes=1 --no-python /bin/true
expect_rc "test_min_max_nodes_parse: --nnodes=1" 0
mrun -- run --dry-run --nnodes=2:20 --rdzv-endpoint=127.0.0.1:29400 --rdzv-id=parse \
    --no-python /bin/true
expect_rc "test_min_max_nodes_parse: --nnodes=2:20" 0
mrun -- run --dry-run --nnodes=2:20:30 --rdzv-endpoint=127.0.0.1:29400 --rdzv-id=parse \
    --no-python /bin/true
expect_usage_error "test_min_max_nodes_parse: --nnodes=2:20:30"

# --- test_capture_logs_using_default_logs_specs: --redirect=3 --tee=3 (argparse prefix of
# --redirects) with TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]: " -----------------
RUN=$(new_run_id)
newdir capture
# shellcheck disable=SC2016
mrun TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]: ' -- run --nnodes=1 \
    --nproc-per-node=4 --rdzv-id="$RUN" --redirect=3 --tee=3 --monitor-interval=1 \
    --start-method=spawn --no-python "$TC/touch_rank.sh" "$D"
expect_rc "test_capture_logs_using_default_logs_specs" 0
for r in 0 1 2 3; do
    expect_out "test_capture_logs_using_default_logs_specs rank $r" "^\[rank$r\]: creating "
done
# the template is really used: another one shows on the console
newdir capture2
# shellcheck disable=SC2016
mrun TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='<${role_name}:${local_rank}:${rank}> ' -- run \
    --nnodes=1 --nproc-per-node=2 --role=trainer --tee=3 --no-python "$TC/touch_rank.sh" "$D"
expect_rc "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE with role_name/local_rank/rank" 0
expect_out "prefix template" "^<trainer:1:1> creating $D/1\$"

# --- --log-dir + --redirects/--tee: torchrun's layout
# <log_dir>/<run_id>[_suffix]/attempt_<n>/<local_rank>/{stdout,stderr}.log, error.json beside --
RUN=$(new_run_id)
newdir logdir
mkdir -p "$T/envs"
mrun -- run --nnodes=1 --nproc-per-node=2 --rdzv-id="$RUN" --log-dir="$T/logs" --redirects=3 \
    "$TC/touch_rank.py" --touch-file-dir="$D" --env-dir="$T/envs"
expect_rc "--log-dir --redirects=3" 0
expect_touched "--log-dir --redirects=3" "$D" 2
# shellcheck disable=SC2206
rdirs=($T/logs/$RUN*)
[ "${#rdirs[@]}" = 1 ] && [ -d "${rdirs[0]}" ] || fail "--log-dir: expected one run directory $T/logs/$RUN*, got: $(ls "$T/logs")"
for lr in 0 1; do
    a=${rdirs[0]}/attempt_0/$lr
    [ -f "$a/stdout.log" ] && [ -f "$a/stderr.log" ] || fail "--log-dir: no $a/{stdout,stderr}.log ($(find "$T/logs" | tr '\n' ' '))"
    grep -q "^Success, created $D/$lr\$" "$a/stdout.log" || fail "--log-dir: $a/stdout.log lacks rank $lr's line: $(head -c 300 "$a/stdout.log")"
    expect_eq "TORCHELASTIC_ERROR_FILE of local rank $lr" "$a/error.json" "$(envval "$T/envs/env.$lr.0" TORCHELASTIC_ERROR_FILE)"
done
grep -q 'Success, created' "$T/out" && { show_output; fail "--redirects=3: worker stdout reached the console"; }
# --tee=1: stdout in the file and on the console, stderr (redirects 2) only in the file
RUN=$(new_run_id)
newdir logdir_tee
mrun -- run --nnodes=1 --nproc-per-node=2 --rdzv-id="$RUN" --log-dir="$T/logs" --redirects=2 \
    --tee=1 --no-python sh -c 'echo "out of $RANK"; echo "err of $RANK" >&2'
expect_rc "--log-dir --redirects=2 --tee=1" 0
a=$(echo "$T/logs/$RUN"*)/attempt_0/1
grep -q '^out of 1$' "$a/stdout.log" || fail "--tee=1: $a/stdout.log lacks 'out of 1'"
grep -q '^err of 1$' "$a/stderr.log" || fail "--redirects=2: $a/stderr.log lacks 'err of 1'"
expect_out "--tee=1: stdout also on the console" '^\[rank1\]: out of 1$'
grep -q 'err of' "$T/err" && { show_output; fail "--redirects=2: worker stderr reached the console"; }

# --- --max-restarts: rank 1 fails in attempt 0, attempt 1 succeeds ------------------------
newdir restarts
mrun -- run --standalone --nproc-per-node=2 --max-restarts=1 --monitor-interval=1 \
    --no-python "$TC/flaky.sh" "$D"
expect_rc "--max-restarts=1 with a failing then succeeding script" 0
[ -e "$D/start.0.1" ] && [ -e "$D/start.1.1" ] || fail "--max-restarts=1: attempt 1 did not start both ranks ($(ls "$D" | tr '\n' ' '))"
[ -e "$D/0" ] && [ -e "$D/1" ] || fail "--max-restarts=1: attempt 1 did not finish ($(ls "$D" | tr '\n' ' '))"
expect_out "--max-restarts=1: the failure happened" '^\[rank1\]: rank 1 fails in attempt 0$'
expect_out "--max-restarts=1: the restart is said" 'restart' "$T/err"
# without restarts the same script is the job's exit code, 3
newdir restarts0
mrun -- run --standalone --nproc-per-node=2 --max-restarts=0 --no-python "$TC/flaky.sh" "$D"
expect_rc "--max-restarts=0 with a failing script (the worker's exit code)" 3
grep -qE '^muster:   rank       : 1 ' "$T/err" || { show_output; fail "--max-restarts=0: root cause is not rank 1"; }
grep -qE '^muster:   exit code  : 3$' "$T/err" || { show_output; fail "--max-restarts=0: root cause lacks exit code 3"; }

# --- -m module (torchrun: python -u -m MODULE ARGS) ----------------------------------------
newdir module
mrun PYTHONPATH="$TC" -- run --standalone --nproc-per-node=2 -m compat_mod "$D"
expect_rc "-m compat_mod" 0
expect_eq "-m compat_mod: module spec seen by rank 1" compat_mod "$(cat "$D/mod.1" 2>/dev/null)"
expect_out "-m compat_mod: run as __main__" '^\[rank0\]: module __main__ spec compat_mod rank 0$'
newdir module2
mrun PYTHONPATH="$TC" -- run --standalone --nproc-per-node=2 --module compat_mod "$D"
expect_rc "--module compat_mod" 0
[ -e "$D/mod.0" ] && [ -e "$D/mod.1" ] || fail "--module compat_mod: workers did not run"

# --- test_virtual_local_rank (the environment part; the compiled-code part needs GPUs):
# LOCAL_RANK=0 everywhere, CUDA_VISIBLE_DEVICES = the agent's entry LOCAL_RANK ---------------
newdir vlr
mkdir -p "$T/vlr_env"
mrun CUDA_VISIBLE_DEVICES=5,7 -- run --nnodes=1 --nproc-per-node=2 --monitor-interval=1 \
    --start-method=spawn --redirect=3 --tee=3 --virtual-local-rank \
    "$TC/touch_rank.py" --touch-file-dir="$D" --env-dir="$T/vlr_env"
expect_rc "test_virtual_local_rank" 0
expect_touched "test_virtual_local_rank" "$D" 2
for r in 0 1; do
    expect_eq "--virtual-local-rank: LOCAL_RANK of rank $r" 0 "$(envval "$T/vlr_env/env.$r.0" LOCAL_RANK)"
done
expect_eq "--virtual-local-rank: CUDA_VISIBLE_DEVICES of rank 0" 5 "$(envval "$T/vlr_env/env.0.0" CUDA_VISIBLE_DEVICES)"
expect_eq "--virtual-local-rank: CUDA_VISIBLE_DEVICES of rank 1" 7 "$(envval "$T/vlr_env/env.1.0" CUDA_VISIBLE_DEVICES)"
# each worker's lines still carry its own prefix (torchrun: its real local rank)
expect_out "--virtual-local-rank: rank 1 output" '^\[rank1\]: Success, created'

assert_no_marked_left "end of test" 10
exit 0
