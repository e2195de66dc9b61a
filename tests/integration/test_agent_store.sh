#!/bin/bash
# The agent's TCPStore with the real client (Debian's torch 1.13, gloo):
# (a) pytorch's test_script_init_method.py shape (env://, no destroy_process_group) STORE_RUNS
#     times with 2 workers: every run's ranks say Done; a run may only fail by the known abort
#     of torch 1.13 on Python 3.11 at interpreter exit ("terminate called without an active
#     exception": a ProcessGroupGloo worker thread drops the all_reduce's tensor after
#     Py_FinalizeEx began, takes the GIL and is pthread_exit()ed through a noexcept frame; seen
#     in a core dump, 2026-12-02). It is the worker's own teardown race, with the agent's store
#     as with worker rank 0's, so it is counted and said, and fails the test only with
#     STORE_STRICT=1. Any other failure fails the test;
# (b) rank 0 exits right after init while rank 1 uses the store for 3 s;
# (c) a restart: attempt 1 sees none of attempt 0's keys, on a fresh and on a fixed MASTER_PORT;
# (d) TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: TORCHELASTIC_USE_AGENT_STORE=False, and it works;
# (e) a hostile client (garbage, a 2^63 length, 50 idle connections) does not stop the job;
# (f) two agents (1 and 2 workers, agent-hosted rendezvous): the other node's worker is a client
#     of group rank 0's agent store, and a restart empties it there too.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
W="$MUSTER_SRC/tests/integration/store_worker.py"
# 1.1-1.6 s a run on the 2-core VM beside other work (2 x 50 runs measured 2026-12-02: 57 s
# and 79 s): 50 runs and the 8 other jobs took 65 s (quiet) to 107 s (loaded)
RUNS=${STORE_RUNS:-50}

aborts=0 failed=0 t0=$(date +%s)
for i in $(seq "$RUNS"); do
    IT_TIMEOUT=60 mrun PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node 2 "$W" init
    [ "$(grep -c '^\[rank[01]\]: Done rank' "$T/out")" = 2 ] || { show_output; fail "(a) run $i: a rank did not say Done"; }
    [ "$RC" = 0 ] && continue
    if [ "$RC" = 134 ] && grep -q '^\[rank[01]\]: terminate called without an active exception' "$T/out" "$T/err"; then
        aborts=$((aborts + 1))
    else
        failed=$((failed + 1))
        show_output 10
    fi
done
note "(a) $RUNS runs in $(( $(date +%s) - t0 )) s: $failed failed, $aborts aborted at interpreter exit after Done"
[ "$failed" = 0 ] || fail "(a) $failed of $RUNS runs failed"
[ "${STORE_STRICT:-0}" = 0 ] || [ "$aborts" = 0 ] || fail "(a) $aborts of $RUNS runs aborted at exit (STORE_STRICT=1)"
grep -q '^\[rank0\]: rank 0 USE_AGENT_STORE=True' "$T/out" || fail "(a) TORCHELASTIC_USE_AGENT_STORE is not True"

IT_TIMEOUT=90 mrun PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node 2 "$W" rank0-leaves
expect_rc "(b) rank 0 exits first" 0
grep -q '^\[rank1\]: rank 1 used the store [0-9]* times after rank 0 left' "$T/out" || { show_output; fail "(b) rank 1 lost the store"; }

for port in "" "--master-port $(( 20000 + RANDOM % 20000 ))"; do
    IT_TIMEOUT=120 mrun PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node 2 --max-restarts 1 $port "$W" restart
    expect_rc "(c) restart ${port:-(fresh port)}" 0
    grep -q "^\[rank0\]: attempt 0 sees its own keys: \[True, True\]" "$T/out" || { show_output; fail "(c) the check does not find attempt 0's keys in attempt 0"; }
    grep -q "^\[rank0\]: attempt 1 sees attempt 0's keys: \[False, False\]" "$T/out" || { show_output; fail "(c) attempt 1 saw attempt 0's keys ${port}"; }
    grep -q '^\[rank1\]: Done rank 1/2' "$T/out" || { show_output; fail "(c) attempt 1 did not finish"; }
done

IT_TIMEOUT=90 mrun PYTHON_EXEC="$TORCH_PY" TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 -- run --standalone --nproc-per-node 2 "$W" init
expect_rc "(d) TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" 0
grep -q '^\[rank0\]: rank 0 USE_AGENT_STORE=False' "$T/out" || { show_output; fail "(d) TORCHELASTIC_USE_AGENT_STORE is not False"; }
[ "$(grep -c '^\[rank[01]\]: Done rank' "$T/out")" = 2 ] || { show_output; fail "(d) a rank did not say Done"; }

IT_TIMEOUT=90 mrun PYTHON_EXEC="$TORCH_PY" -- run --standalone --nproc-per-node 2 "$W" hostile
expect_rc "(e) a hostile client" 0
[ "$(grep -c '^\[rank[01]\]: Done rank' "$T/out")" = 2 ] || { show_output; fail "(e) a rank did not say Done"; }
grep -q 'agent store on port [0-9]*: closed a connection from .*: a key over the key bound' "$T/err" || { show_output; fail "(e) the 2^63 length was not refused"; }
grep -q 'agent store on port [0-9]* closed connections: .*unknown query' "$T/err" || { show_output; fail "(e) no count of the refused connections"; }

P=$(free_port)
for i in 1 2; do
    agent a$i PYTHON_EXEC="$TORCH_PY" -- --nnodes 2 --nproc-per-node $i --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:$P --rdzv-id store-$$ --rdzv-conf join_timeout=60 \
        --max-restarts 1 "$W" restart
done
agents_exit 150 0 a1 a2
cat "$T"/a1.out "$T"/a2.out > "$T/f.out"
[ "$(grep -c 'USE_AGENT_STORE=True attempt 1' "$T/f.out")" = 3 ] || { show_all; fail "(f) not 3 workers in attempt 1 with the agent store"; }
grep -q "^\[rank0\]: attempt 1 sees attempt 0's keys: \[False, False, False\]" "$T/f.out" || { show_all; fail "(f) attempt 1 saw attempt 0's keys"; }
[ "$(grep -c '^\[rank[0-2]\]: Done rank' "$T/f.out")" = 3 ] || { show_all; fail "(f) a rank did not say Done"; }

assert_no_marked_left "end of test" 10
exit 0
