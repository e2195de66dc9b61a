# shellcheck shell=bash
# shellcheck disable=SC2034 # TC and IT_TIMEOUT are read by the tests that source this file
# Shared set-up of the test_torchrun_compat*.sh tests (pytorch's test_run.py as muster command
# lines). Source after lib.sh. Sets TC (this folder) and the environment of pytorch's setUp().

TC=$IT_DIR/torchrun_compat

# setUp(): no PET_* left over, a sentinel the workers must inherit; a private HOME (muster keeps
# its per-user token there) and no MUSTER_TOKEN, as for a user who never heard of tokens
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(PET_[A-Za-z0-9_]*\)=.*/\1/p')
export TEST_SENTINEL_PARENT=FOOBAR
export HOME=$T/home
mkdir -p "$HOME"
unset MUSTER_TOKEN OMP_NUM_THREADS CUDA_VISIBLE_DEVICES TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
export PYTHON_EXEC=$TORCH_PY
# no GPU, whatever this host has: --nproc-per-node auto means the CPU count
export MUSTER_NVIDIA_PROC_DIR=$T/no-gpus
IT_TIMEOUT=180

# what a failed assertion shows: muster's output (single agent) or every agent's (show_all)
TC_SHOW=${TC_SHOW:-show_output}

# a run id like str(uuid.uuid4().int): up to 39 decimal digits
new_run_id() {
    od -An -N16 -tu8 /dev/urandom | tr -d ' \n' | cut -c1-39
}

# newdir NAME: a fresh touch-file dir in $D
newdir() {
    D=$T/$1
    mkdir -p "$D"
}

# expect_touched WHAT DIR N: DIR holds exactly the files 0..N-1 (one per global rank), as
# assertSetEqual({str(i) for i in range(world_size)}, set(os.listdir(test_dir)))
expect_touched() {
    local want got
    want=$(seq 0 $(($3 - 1)) | sort | tr '\n' ' ')
    got=$(ls -A "$2" | sort | tr '\n' ' ')
    [ "$want" = "$got" ] || { $TC_SHOW; fail "$1: files in the touch dir: expected { $want}, got { $got}"; }
}

# expect_out WHAT PATTERN [FILE]: muster's stdout (or FILE) has a line matching PATTERN (grep -E)
expect_out() {
    grep -qE -- "$2" "${3:-$T/out}" || { $TC_SHOW; fail "$1: no line matching '$2' in ${3:-stdout}"; }
}

# expect_usage_error WHAT: exit 2 and a "muster: error:" line (torchrun: ValueError before any
# worker starts)
expect_usage_error() {
    expect_rc "$1" 2
    grep -q '^muster: error:' "$T/err" || { show_output; fail "$1: no 'muster: error:' line"; }
}

# free_tcp_port: a port nobody uses now (like get_free_port())
free_tcp_port() {
    local p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    while ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null | grep -q .; do
        p=$((p + 1))
    done
    echo "$p"
}
