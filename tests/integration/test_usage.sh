#!/bin/bash
# Usage errors exit 2 with exactly one `muster: error: ...` line on stderr and start nothing;
# --help and --version work and the help names every torchrun flag.
. "$(dirname "$0")/lib.sh"

cd "$T" || fail "cd $T"
printf 'open("%s/STARTED", "w")\n' "$T" > train.py
printf '#!/bin/sh\n: > %s/STARTED\n' "$T" > prog.sh
chmod +x prog.sh

# expect_usage_error WHAT [VAR=VALUE...] -- ARGS...
expect_usage_error() {
    local what=$1
    shift
    IT_TIMEOUT=20 mrun -u PET_NPROC_PER_NODE -u PET_NNODES "$@"
    if [ "$RC" != 2 ]; then
        show_output
        fail "$what: expected exit code 2, got $RC"
    fi
    local n
    n=$(wc -l < "$T/err")
    if [ "$n" != 1 ] || ! grep -q '^muster: error: ' "$T/err"; then
        show_output
        fail "$what: expected exactly one stderr line starting 'muster: error: ', got $n line(s)"
    fi
    [ -e "$T/STARTED" ] && fail "$what: a worker was started"
    LAST_ERR=$(cat "$T/err")
    return 0
}

expect_usage_error "unknown flag" -- run --standalone --no-such-flag 1 train.py
expect_usage_error "--nnodes 0" -- run --nnodes 0 --standalone train.py
expect_usage_error "--nnodes 3:2" -- run --nnodes 3:2 --standalone train.py
expect_usage_error "--nnodes x" -- run --nnodes x --standalone train.py
expect_usage_error "--nnodes 1:x" -- run --nnodes 1:x --standalone train.py
expect_usage_error "--nproc-per-node abc" -- run --standalone --nproc-per-node abc train.py
expect_usage_error "--nproc-per-node 0" -- run --standalone --nproc-per-node 0 train.py
expect_usage_error "--nproc-per-node -1" -- run --standalone --nproc-per-node -1 train.py
expect_usage_error "missing script file" -- run --standalone --nproc-per-node 1 no_such_script.py
expect_usage_error "missing --no-python executable" -- run --standalone --no-python ./no_such_prog
expect_usage_error "no script" -- run --standalone --nproc-per-node 2
expect_usage_error "-m with --no-python" -- run --standalone -m --no-python train.py
expect_usage_error "--max-restarts -1" -- run --standalone --max-restarts -1 train.py
expect_usage_error "--max-restarts abc" -- run --standalone --max-restarts abc train.py
expect_usage_error "--rdzv-conf join_timeout=abc" -- run --standalone --rdzv-conf join_timeout=abc train.py
expect_usage_error "--redirects 7" -- run --standalone --redirects 7 train.py
expect_usage_error "--tee x" -- run --standalone --tee x train.py
expect_usage_error "--nproc-per-node value missing" -- run --standalone --nproc-per-node
if ! ls /dev/nvidia0 >/dev/null 2>&1 && ! command -v nvidia-smi >/dev/null 2>&1; then
    expect_usage_error "--nproc-per-node gpu without GPUs" -- run --standalone --nproc-per-node gpu train.py
    echo "$LAST_ERR" | grep -qi 'gpu' || fail "--nproc-per-node gpu: the error does not mention GPUs: $LAST_ERR"
else
    note "GPU present: not testing --nproc-per-node gpu as an error"
fi

expect_usage_error "PET_NPROC_PER_NODE=abc" PET_NPROC_PER_NODE=abc -- run --standalone train.py

# help and version
# every option the parser knows (its table, launcher/options.def), torchrun's and muster's own
flags=$(sed -n 's/.*\.name = "\([a-z-]*\)".*/\1/p' "$MUSTER_SRC/launcher/options.def")
[ "$(wc -w <<<"$flags")" -gt 40 ] || fail "cannot read the option table launcher/options.def"
for h in "--help" "run --help"; do
    # shellcheck disable=SC2086
    IT_TIMEOUT=20 mrun -- $h
    expect_rc "muster $h" 0
    [ -s "$T/out" ] || fail "muster $h printed nothing on stdout"
    for f in $flags; do
        re="--${f//-/[-_]}"
        grep -qE -- "$re" "$T/out" || fail "muster $h does not mention --$f"
    done
    grep -qE -- '(^|[^a-z-])-m([^a-z]|$)' "$T/out" || fail "muster $h does not mention -m"
done
IT_TIMEOUT=20 mrun -- --version
expect_rc "muster --version" 0
grep -qE '[0-9]+\.[0-9]+' "$T/out" || fail "muster --version prints no version number: $(cat "$T/out")"
# the static recipe's MASTER_PORT + 1 rule says why
IT_TIMEOUT=20 mrun -- run --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port 65535 \
    --no-python /bin/true
expect_rc "--master-port 65535 in the static recipe" 2
grep -q "node rank 0 hosts muster's rendezvous on MASTER_PORT + 1" "$T/err" ||
    { show_output; fail "the MASTER_PORT + 1 refusal does not say why"; }
# --quiet keeps errors: the one line that explains a refused --checkpoint-dir
mkdir -m 0777 "$T/ww"
IT_TIMEOUT=20 mrun -- run --quiet --standalone --checkpoint-dir "$T/ww" --no-python /bin/true
expect_rc "--quiet with a world-writable --checkpoint-dir" 2
grep -q "error: refusing --checkpoint-dir $T/ww: writable by others" "$T/err" ||
    { show_output; fail "--quiet dropped the line that says why"; }
# `muster` alone: the commands on stderr, exit 2, not the 260 lines of --help on stdout
IT_TIMEOUT=20 mrun --
expect_rc "muster with no command" 2
[ -s "$T/out" ] && fail "muster with no command printed on stdout"
grep -q "usage: muster COMMAND" "$T/err" || fail "muster with no command shows no usage line"
[ "$(wc -l <"$T/err")" -lt 40 ] || fail "muster with no command printed $(wc -l <"$T/err") lines"
# an unwritable --log-dir is the operator's to fix: exit 2 with the reason, not 70
if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null; then
    mkdir -m 0555 "$T/ro"
    chmod 0755 "$T"
    rc=0
    runuser -u nobody -- "$MUSTER_BIN" run --standalone --log-dir "$T/ro/logs" --no-python /bin/true \
        >"$T/out" 2>"$T/err" || rc=$?
    expect_eq "exit code of an unwritable --log-dir" 2 "$rc"
    grep -q "cannot open --log-dir $T/ro/logs: .*Permission denied" "$T/err" ||
        { show_output; fail "no reason for the unwritable --log-dir"; }
fi
[ -e "$T/STARTED" ] && fail "a worker was started by a help/usage call"
exit 0
