#!/bin/bash
# --dry-run prints the resolved plan (header, then one block per worker with its command and its
# complete environment) and starts nothing; MUSTER_TOKEN's value never appears.
. "$(dirname "$0")/lib.sh"

cd "$T" || fail "cd $T"
printf 'open("%s/STARTED", "w")\n' "$T" > train.py
mkdir -p pkg && : > pkg/__init__.py && printf 'open("%s/STARTED", "w")\n' "$T" > pkg/mod.py
printf '#!/bin/sh\n: > %s/STARTED\n' "$T" > prog.sh && chmod +x prog.sh

# block OUTFILE N: prints the body of "[worker N]" (up to the next blank line or block)
block() {
    awk -v h="[worker $2]" '$0 == h {on = 1; next} on && (/^\[worker / || /^$/) {exit} on' "$1"
}
# hdr KEY: value of KEY=... in the header (before the first [worker block)
hdr() {
    awk -v k="$1=" '/^\[worker /{exit} index($0, k) == 1 {print substr($0, length(k) + 1); exit}' "$T/out"
}

# the interpreter is resolved once on PATH and shown as such
PY=$(command -v python3) || fail "no python3 on PATH"
IT_TIMEOUT=20 mrun -u PYTHON_EXEC -u OMP_NUM_THREADS MUSTER_TOKEN=s3cr3t-test -- \
    run --dry-run --standalone --nproc-per-node 3 train.py --lr 1
expect_rc "--dry-run --standalone --nproc-per-node 3" 0
[ -e "$T/STARTED" ] && fail "--dry-run started a worker"
grep -q 's3cr3t-test' "$T/out" "$T/err" && fail "--dry-run printed the value of MUSTER_TOKEN"
# header
run_id=$(hdr run_id)
[ -n "$run_id" ] || { show_output; fail "header lacks run_id="; }
expect_eq "header rdzv_backend" muster "$(hdr rdzv_backend)"
[ -n "$(hdr rdzv_endpoint)" ] || fail "header lacks rdzv_endpoint="
expect_eq "header nnodes" 1:1 "$(hdr nnodes)"
expect_eq "header nproc_per_node" 3 "$(hdr nproc_per_node)"
expect_eq "header world_size" 3 "$(hdr world_size)"
expect_eq "header max_restarts" 0 "$(hdr max_restarts)"
[ "$(grep -c '^\[worker [0-9]*\]$' "$T/out")" = 3 ] || { show_output; fail "expected 3 [worker N] blocks"; }
for r in 0 1 2; do
    block "$T/out" $r > "$T/b$r"
    [ -s "$T/b$r" ] || fail "[worker $r] block missing or empty"
    expect_eq "worker $r command" "command: $PY -u train.py --lr 1" "$(grep '^command: ' "$T/b$r")"
    for kv in RANK=$r LOCAL_RANK=$r GROUP_RANK=0 ROLE_RANK=$r ROLE_NAME=default LOCAL_WORLD_SIZE=3 \
              WORLD_SIZE=3 GROUP_WORLD_SIZE=1 ROLE_WORLD_SIZE=3 TORCHELASTIC_RESTART_COUNT=0 \
              TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_RUN_ID=$run_id TORCHELASTIC_USE_AGENT_STORE=True \
              TORCH_NCCL_ASYNC_ERROR_HANDLING=1 OMP_NUM_THREADS=1 MUSTER_JOB_ID=$run_id; do
        grep -qxF "$kv" "$T/b$r" || { cat "$T/b$r" >&2; fail "[worker $r] lacks the line $kv"; }
    done
    for k in MASTER_ADDR MASTER_PORT TORCHELASTIC_ERROR_FILE; do
        grep -q "^$k=" "$T/b$r" || fail "[worker $r] lacks $k"
    done
    if grep -q '^MUSTER_TOKEN=' "$T/b$r"; then
        expect_eq "worker $r MUSTER_TOKEN line" "MUSTER_TOKEN=<hidden>" "$(grep '^MUSTER_TOKEN=' "$T/b$r")"
    fi
    # only comments, command: and KEY=VALUE lines in a block
    bad=$(grep -vE '^(#.*|command: .*|[A-Za-z_][A-Za-z0-9_]*=.*)$' "$T/b$r" | head -3)
    [ -z "$bad" ] || fail "[worker $r] has lines that are neither KEY=VALUE nor command: $bad"
done

# -m pkg.mod
IT_TIMEOUT=20 mrun -u PYTHON_EXEC -- run --dry-run --standalone --nproc-per-node 1 -m pkg.mod --x y
expect_rc "--dry-run -m pkg.mod" 0
expect_eq "-m command" "command: $PY -u -m pkg.mod --x y" "$(block "$T/out" 0 | grep '^command: ')"

# PYTHON_EXEC
IT_TIMEOUT=20 mrun PYTHON_EXEC=/usr/bin/python3 -- run --dry-run --standalone --nproc-per-node 2 train.py
expect_rc "--dry-run with PYTHON_EXEC" 0
expect_eq "PYTHON_EXEC command" "command: /usr/bin/python3 -u train.py" "$(block "$T/out" 1 | grep '^command: ')"

# an interpreter that is not there: one line and exit 2 before anything starts
IT_TIMEOUT=20 mrun PYTHON_EXEC=/nonexistent/python -- run --standalone --nproc-per-node 2 train.py
expect_rc "a PYTHON_EXEC that does not exist" 2
grep -q "PYTHON_EXEC '/nonexistent/python' is not an executable file" "$T/err" || { show_output; fail "no clear line for a missing PYTHON_EXEC"; }
[ -e "$T/STARTED" ] && fail "a worker started with a missing PYTHON_EXEC"
mkdir -p "$T/nopy" && ln -sf "$(command -v timeout)" "$T/nopy/timeout" # mrun's timeout only
IT_TIMEOUT=20 mrun -u PYTHON_EXEC PATH="$T/nopy" -- run --standalone train.py
expect_rc "no python3 on PATH" 2
grep -q "python 'python3' not found on PATH (set PYTHON_EXEC" "$T/err" || { show_output; fail "no hint when python3 is not on PATH"; }

# a worker that cannot import a module: the summary names the interpreter and PYTHON_EXEC
echo 'import no_such_module_for_muster_test' > nomod.py
IT_TIMEOUT=60 mrun -u PYTHON_EXEC -- run --standalone --nproc-per-node 2 nomod.py
expect_rc "a worker without its module" 1
grep -q "hint       : the workers printed \"No module named 'no_such_module_for_muster_test'\": $PY does not have it; set PYTHON_EXEC" "$T/err" ||
    { show_output; fail "no hint naming the interpreter and PYTHON_EXEC"; }

# a --master-port some other process holds: one line and exit 2, not a traceback per rank
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True); time.sleep(30)' > "$T/busy.port" &
BUSY=$!
IT_BG_PIDS="${IT_BG_PIDS:-} $BUSY"
wait_for 10 test -s "$T/busy.port" || fail "no busy port"
IT_TIMEOUT=30 mrun -- run --standalone --nproc-per-node 2 --master-port "$(cat "$T/busy.port")" \
    --no-python ./prog.sh
expect_rc "a busy --master-port" 2
grep -q "error: MASTER_PORT $(cat "$T/busy.port") is in use on this node" "$T/err" ||
    { show_output; fail "no clear line for a busy --master-port"; }
[ -e "$T/STARTED" ] && fail "a worker started although MASTER_PORT was taken"
kill "$BUSY" 2>/dev/null

# --no-python
IT_TIMEOUT=20 mrun -- run --dry-run --standalone --nproc-per-node 2 --no-python ./prog.sh a 'b'
expect_rc "--dry-run --no-python" 0
expect_eq "--no-python command" "command: ./prog.sh a b" "$(block "$T/out" 0 | grep '^command: ')"

# --max-restarts and OMP_NUM_THREADS from outside
IT_TIMEOUT=20 mrun OMP_NUM_THREADS=5 -- run --dry-run --standalone --nproc-per-node 2 --max-restarts 4 train.py
expect_rc "--dry-run --max-restarts 4" 0
expect_eq "header max_restarts" 4 "$(hdr max_restarts)"
block "$T/out" 1 | grep -qxF TORCHELASTIC_MAX_RESTARTS=4 || fail "TORCHELASTIC_MAX_RESTARTS=4 missing"
if block "$T/out" 1 | grep -q '^OMP_NUM_THREADS='; then
    expect_eq "OMP_NUM_THREADS set outside" OMP_NUM_THREADS=5 "$(block "$T/out" 1 | grep '^OMP_NUM_THREADS=')"
fi

[ -e "$T/STARTED" ] && fail "--dry-run started a worker"
assert_no_marked_left "end of test" 2
exit 0
