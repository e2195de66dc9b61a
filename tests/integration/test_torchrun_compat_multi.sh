#!/bin/bash
# pytorch's own launcher tests (test/distributed/launcher/test_run.py) that use an elastic
# --nnodes MIN:MAX with --rdzv-endpoint, as `muster run` command lines: the agents run on this
# machine, the one whose endpoint port is free hosts the rendezvous. The flags are those of the
# pytorch tests, in their spelling (--rdzv-conf with literal quotes, --rdzv_conf=...). No token
# is given: muster makes a per-user one in $HOME/.muster, shared by the agents of one HOME.
# The workers are plain scripts (no torch import), in the role of pytorch's bin/test_script.py.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

TC_SHOW=show_all
. "$(dirname "$0")/torchrun_compat/common.sh"
IT_TIMEOUT=120

# --- test_launch_elastic: --nnodes=1:2, one agent comes; the round closes with it after the
# last call (1 s) -------------------------------------------------------------------------
RUN=$(new_run_id)
P=$(free_port)
newdir elastic
t0=$(now_ms)
agent e1 -- --nnodes=1:2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=localhost:"$P" \
    "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'" --rdzv-id="$RUN" \
    --monitor-interval=1 --start-method=spawn "$TC/touch_rank.py" --touch-file-dir="$D"
agent_wait e1 90
expect_agent_rc e1 0
expect_touched "test_launch_elastic" "$D" 4
el=$(( $(now_ms) - t0 ))
grep -q "^\[rank3\]: TORCHELASTIC_RUN_ID = $RUN\$" "$T/e1.out" || { show_agent e1; fail "test_launch_elastic: rank 3 lacks TORCHELASTIC_RUN_ID = $RUN"; }
grep -q "^\[rank0\]: WORLD_SIZE = 4\$" "$T/e1.out" || { show_agent e1; fail "test_launch_elastic: WORLD_SIZE is not 4"; }
# join_timeout=5 holds: a 1-of-2 round does not wait for the default last call (30 s)
[ "$el" -lt 25000 ] || fail "test_launch_elastic took ${el} ms with last_call_timeout=1"
# test_launch_shutdown (the rendezvous handler is shut down): nothing listens on the endpoint
ss -Htln "( sport = :$P )" | grep -q . && fail "test_launch_shutdown: port $P still listened on after the job"

# --- test_launch_elastic_worker_raise_exception: ChildFailedError -> root cause, exit code --
RUN=$(new_run_id)
P=$(free_port)
agent e2 -- --nnodes=1:2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=localhost:"$P" \
    "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'" --rdzv-id="$RUN" \
    --monitor-interval=1 --max-restarts=0 --start-method=spawn "$TC/touch_rank.py" --fail
agent_wait e2 90
expect_agent_rc e2 1
grep -q "root cause" "$T/e2.err" || { show_agent e2; fail "test_launch_elastic_worker_raise_exception: no root-cause summary"; }
grep -qE '^muster:   exit code  : 1$' "$T/e2.err" || { show_agent e2; fail "test_launch_elastic_worker_raise_exception: root cause lacks 'exit code  : 1'"; }
grep -qE '^muster:   rank       : [0-3] ' "$T/e2.err" || { show_agent e2; fail "test_launch_elastic_worker_raise_exception: root cause names no rank"; }
grep -q 'RuntimeError: raising exception since --fail flag was set' "$T/e2.err" \
    || { show_agent e2; fail "test_launch_elastic_worker_raise_exception: the traceback is not on the console"; }

# --- test_launch_elastic_multiple_agents: two agents at once, --nnodes=1:2 -> 8 workers ----
RUN=$(new_run_id)
P=$(free_port)
newdir multiple
mkdir -p "$T/multiple_env"
for a in m1 m2; do
    agent $a -- --nnodes=1:2 --nproc-per-node=4 --rdzv-backend=c10d \
        --rdzv-endpoint=localhost:"$P" --rdzv_conf=timeout=5 --rdzv-id="$RUN" \
        --monitor-interval=1 --start-method=spawn "$TC/touch_rank.py" --touch-file-dir="$D" \
        --env-dir="$T/multiple_env"
done
agent_wait m1 90
expect_agent_rc m1 0
agent_wait m2 90
expect_agent_rc m2 0
expect_touched "test_launch_elastic_multiple_agents" "$D" 8
# one round of 2 nodes: contiguous ranks per node, one MASTER_ADDR/PORT, the same run id
check_ranks "$T/multiple_env" 0 8 2
for r in 0 7; do
    expect_eq "test_launch_elastic_multiple_agents: TORCHELASTIC_RUN_ID of rank $r" "$RUN" \
        "$(envval "$T/multiple_env/env.$r.0" TORCHELASTIC_RUN_ID)"
done
for r in 0 7; do
    grep -q "^\[rank$r\]: WORLD_SIZE = 8\$" "$T/m1.out" "$T/m2.out" || { show_all; fail "test_launch_elastic_multiple_agents: rank $r did not see WORLD_SIZE = 8"; }
done

# --- elastic, the second agent joining later: round 1 runs with one node (2 workers), the
# late agent makes the job re-form with two nodes (4 workers); both rounds work -------------
RUN=$(new_run_id)
P=$(free_port)
newdir late
agent l1 -- --nnodes=1:2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:"$P" \
    --rdzv-conf="join_timeout=30,last_call_timeout=1" --rdzv-id="$RUN" --no-python \
    "$TC/hold.sh" "$D"
wait_for 60 files_at_least 2 "$D/w2/env.*" || { show_agent l1; fail "late join: round 1 (one node) did not start 2 workers"; }
check_ranks "$D/w2" 0 2 1
agent l2 -- --nnodes=1:2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:"$P" \
    --rdzv-conf="join_timeout=30,last_call_timeout=1" --rdzv-id="$RUN" --no-python \
    "$TC/hold.sh" "$D"
wait_for 60 files_at_least 4 "$D/w4/env.*" || { show_all; fail "late join: no round with both nodes (4 workers) after the second agent came ($(ls "$D"/w4 2>/dev/null | tr '\n' ' '))"; }
# a scale-up re-forms the group without using a restart: TORCHELASTIC_RESTART_COUNT stays 0
check_ranks "$D/w4" 0 4 2
: > "$D/release"
agent_wait l1 60
expect_agent_rc l1 0
agent_wait l2 60
expect_agent_rc l2 0

assert_no_marked_left "end of test" 10
exit 0
