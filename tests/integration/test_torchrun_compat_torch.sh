#!/bin/bash
# pytorch's own launcher tests (test/distributed/launcher/test_run.py) whose workers import
# torch, as `muster run` command lines (see test_torchrun_compat.sh for the others):
# is_torchelastic_launched() under muster, --logs_specs, init_process_group("gloo") with
# init_method tcp:// and env://, and a worker that raises under torch's @record (the error
# file's message in muster's root cause). Every job is 1 or 2 workers.
. "$(dirname "$0")/lib.sh"

have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
. "$(dirname "$0")/torchrun_compat/common.sh"

# --- test_is_torchelastic_launched ---------------------------------------------------------
mrun -- run --run-path --nnodes=1 --nproc-per-node=1 --monitor-interval=1 \
    "$TC/is_te_launched.py" --out-file="$T/te.launched"
expect_rc "test_is_torchelastic_launched" 0
expect_eq "test_is_torchelastic_launched: is_torchelastic_launched()" True "$(cat "$T/te.launched" 2>/dev/null)"

# --- test_is_torchelastic_launched_with_logs_spec_defined (--logs_specs=default) -----------
mrun -- run --run-path --nnodes=1 --nproc-per-node=1 --monitor-interval=1 --logs_specs=default \
    "$TC/is_te_launched.py" --out-file="$T/te.logs_specs"
expect_rc "test_is_torchelastic_launched_with_logs_spec_defined" 0
expect_eq "test_is_torchelastic_launched_with_logs_spec_defined" True "$(cat "$T/te.logs_specs" 2>/dev/null)"

# --- test_logs_logs_spec_entrypoint_must_be_defined (ValueError) ----------------------------
mrun -- run --run-path --nnodes=1 --nproc-per-node=1 --monitor-interval=1 \
    --logs_specs=DOESNOT_EXIST "$TC/is_te_launched.py" --out-file="$T/te.never"
expect_usage_error "test_logs_logs_spec_entrypoint_must_be_defined"
[ -e "$T/te.never" ] && fail "test_logs_logs_spec_entrypoint_must_be_defined: the worker ran"

# --- test_is_not_torchelastic_launched: the same script without a launcher says False -------
"$TORCH_PY" "$TC/is_te_launched.py" --out-file="$T/te.not" || fail "is_te_launched.py failed alone"
expect_eq "test_is_not_torchelastic_launched" False "$(cat "$T/te.not")"

# --- test_init_method_tcp_with_torchelastic / test_init_method_env_with_torchelastic --------
# (2 workers instead of 4: each imports torch on a loaded two-core machine)
for im in tcp env; do
    P=$(free_tcp_port)
    if [ $im = tcp ]; then url=tcp://localhost:$P; else url=env://; fi
    mrun -- run --run-path --nnodes=1 --nproc-per-node=2 --master-addr=localhost \
        --master-port="$P" --monitor-interval=1 "$TC/init_method.py" --init-method="$url"
    expect_rc "test_init_method_${im}_with_torchelastic ($url)" 0
    expect_out "test_init_method_${im}_with_torchelastic rank 0" '^\[rank0\]: Done rank 0/2$'
    expect_out "test_init_method_${im}_with_torchelastic rank 1" '^\[rank1\]: Done rank 1/2$'
done

# --- test_launch_elastic_worker_raise_exception (ChildFailedError), single node, the worker's
# entry point under torch's @record, which writes the exception to TORCHELASTIC_ERROR_FILE:
# muster's root cause names the rank, the worker's exit code and the exception (torchrun's
# ChildFailedError report); muster exits with the worker's code. The multi-agent form, without
# @record, is in test_torchrun_compat_multi.sh -----------------------------------------------
mrun -- run --standalone --nproc-per-node=2 --max-restarts=0 --monitor-interval=1 \
    "$TC/touch_rank.py" --fail --record
expect_rc "worker raises RuntimeError under @record (exit code of the worker)" 1
grep -q 'root cause' "$T/err" || { show_output; fail "worker raises: no root-cause summary"; }
grep -qE '^muster:   exit code  : 1$' "$T/err" || { show_output; fail "worker raises: root cause lacks 'exit code  : 1'"; }
grep -qE '^muster:   rank       : [01] ' "$T/err" || { show_output; fail "worker raises: root cause names no rank"; }
grep -q '^muster:   message    : .*raising exception since --fail flag was set' "$T/err" \
    || { show_output; fail "worker raises: the error file's message is not in the root cause"; }

assert_no_marked_left "end of test" 10
exit 0
