#!/bin/bash
# Every node's checkpoint: a sharded checkpoint written by every rank on 3 namespace hosts with
# separate --checkpoint-dir (trainers/sharded_style.py, 2 gloo ranks per host, 6 in all):
# each rank writes its slice of the state into step-N/ on its own host, and rank 0 adds
# .metadata on host 1 only. With --replicate-checkpoints 1 each host records its own part when
# rank 0 records step-N, and copies it to the next host (1 -> 2, 2 -> 3, 3 -> 1).
# Training pauses after step 15 (a hold file; the steps are quick otherwise) and the server is restarted: it forgets the parts
# it was told of, and the agents report theirs again when they are back (REJOIN; without that
# the round would resume from rank 0's part alone). Then host 3
# is cut off and its agent SIGKILLed (its shards are gone with it). The job must go on
# with hosts 1 and 2 (--nnodes 2:3, 4 ranks) from the newest step whose every part the two
# survivors hold between them (host 3's from the copy on host 1), and end with weights
# bit-identical to a fault-free run.
# With SHARDED_REPLACE=1 (test_netns_ckpt_sharded_replace.sh) a replacement agent with an empty
# directory joins on host 3 after the cut: the job goes on with 3 hosts (6 ranks) from the same
# step; the newcomer holds none of it (MUSTER_RESUME_FROM names the checkpoint all the same) and
# its ranks get their state from the shards the other two hosts hold.
. "$(dirname "$0")/ft.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"
need_torch

PY="$IT_DIR/trainers/sharded_style.py"
REPLACE=${SHARDED_REPLACE:-0}
STEPS=40
digest_of() { sed -n 's/^\[rank0\]: final sha256 \([0-9a-f]*\) step .*/\1/p' "$1" | tail -1; }

ns_job nsshard 4 4

# 1. fault-free reference: one host, 2 ranks (the weights do not depend on the world size)
IT_TIMEOUT=120 ft_run -- --standalone --nproc-per-node 2 --checkpoint-dir "$T/ref" "$PY" \
    --ckpt_dir "$T/ref" --steps $STEPS
expect_rc "fault-free run" 0
ref=$(digest_of "$T/out")
[ -n "$ref" ] || { show_output; fail "fault-free run: no 'final sha256' line from rank 0"; }
note "fault-free digest $ref"

# 2. three hosts, separate directories, each node's part copied to the next host
start_agent() { # start_agent K NAME DIR
    ns_bg "$1" "$2" PYTHON_EXEC="$TORCH_PY" GLOO_SOCKET_IFNAME=$NS_IF -- "$MUSTER_BIN" run \
        --nnodes 2:3 --nproc-per-node 2 --rdzv-endpoint "${HOST_ADDR[4]}:$P" --rdzv-id "$JOB" \
        --local-addr "${HOST_ADDR[$1]}" --max-restarts 2 --checkpoint-dir "$3" \
        --replicate-checkpoints 1 \
        --rdzv-conf join_timeout=60,last_call_timeout=5,heartbeat_timeout=2,keep_alive_interval=0.5 \
        "$PY" --ckpt_dir "$3" --steps $STEPS --step_sleep 0.05 --hold_at 15 --hold_file "$T/hold"
}
touch "$T/hold" 
for k in 1 2 3; do
    start_agent $k a$k "$T/c$k"
    sleep 0.3 # join order = group rank in round 0
done
# host 1 keeps host 3's part (group rank 2's: part 3 of 3) of step-15
wait_for 90 grep_in "$T/a1.err" "muster-part-3-of-3.step-15 stored as a replica from group rank 2" ||
    { show_all; fail "no copy of host 3's part of step-15 on host 1 within 90 s"; }
grep -q "checkpoint step-15 recorded (step 15" "$T/a1.err" ||
    { show_all; fail "host 1 (group rank 0) did not record step-15 as a whole checkpoint"; }
grep -q "checkpoint step-15 recorded as part 3 of 3" "$T/a3.err" ||
    { show_all; fail "host 3 did not record its part of step-15"; }
grep -q "checkpoint step-15 recorded as part 2 of 3" "$T/a2.err" ||
    { show_all; fail "host 2 did not record its part of step-15"; }
[ ! -e "$T/c3/step-15/.metadata" ] && [ -f "$T/c3/step-15/__4_0.distcp" ] ||
    fail "host 3's step-15 is not its ranks' shards alone: $(ls -A "$T/c3/step-15")"

# 3. the server restarted while training is held after step 15: the parts come back from the
# agents, not from its memory
stop_server
ns_server 4 $P
for k in 1 2 3; do
    wait_for 60 grep_in "$T/a$k.err" "rendezvous server reached again" ||
        { show_all; fail "agent $k did not get back to the restarted server"; }
done
sleep 2 # the reports sent at the reconnect reach the server
st=$(ns_exec 1 "$MUSTER_BIN" status --rdzv-endpoint "${HOST_ADDR[4]}:$P" --rdzv-id "$JOB" 2>&1)
printf '%s\n' "$st" | grep -qE '^  step-15 +15 +3/3 +1:[^ ]+ 2:[^ ]+ 3:[^ ]+,[^ ]+$' ||
    { printf '%s\n' "$st" >&2; fail "muster status does not show step-15's 3 parts held (part 3 twice)"; }

# 4. host 3 cut off, its agent killed: no FIN reaches anyone
ns_cut 3
kill -9 "${APID[a3]}"
wait "${APID[a3]}" 2>/dev/null
# the newest step of which host 1 held host 3's part when it was cut
kept=$(sed -n 's/^muster: checkpoint \.muster-part-3-of-3\.step-\([0-9]*\) stored as a replica.*/\1/p' \
    "$T/a1.err" | sort -n | tail -1)
note "newest copy of host 3's part on host 1: step-$kept"
wait_for 20 grep_in "$T/a1.err" "restarting workers" || { show_all; fail "the cut of host 3 was not noticed"; }
rm -f "$T/hold"
survivors=(a1 a2)
if [ "$REPLACE" = 1 ]; then
    ns_restore 3
    start_agent 3 a3b "$T/c3b" # a replacement node with an empty directory
    survivors+=(a3b)
fi
wait_for 60 grep_in "$T/a1.err" "attempt 1 resumes from" || { show_all; fail "round 1 did not start"; }
line=$(resumes_of "$T/a1.err" | tail -1)
step=$(printf '%s\n' "$line" | sed -n 's/^1 sharded checkpoint step-\([0-9]*\) (step [0-9]*): [0-9] of its 3 parts on this node$/\1/p')
[ -n "$step" ] || { show_all; fail "host 1 did not resume from a sharded checkpoint: '$line'"; }
[ "$step" -ge "$kept" ] || fail "resumed from step-$step, older than step-$kept whose parts survived"
grep -q "attempt 1 resumes from sharded checkpoint step-$step (step $step)" "$T/a2.err" ||
    { show_all; fail "host 2 does not resume from the same checkpoint step-$step"; }
if [ "$REPLACE" = 1 ]; then
    wait_for 60 grep_in "$T/a3b.err" "attempt 1 resumes from" || { show_all; fail "the replacement did not start"; }
    grep -q "attempt 1 resumes from sharded checkpoint step-$step (step $step): 0 of its 3 parts on this node" "$T/a3b.err" ||
        { show_all; fail "the replacement on host 3 does not resume from step-$step, holding nothing of it"; }
fi
agents_exit 120 0 "${survivors[@]}"
for a in "${survivors[@]}"; do cat "$T/$a.out"; done > "$T/all.out"
grep -q "^\[rank0\]: rank 0: resumed from step $step: [0-9] of 6 shards on this node" "$T/all.out" ||
    { cat "$T/all.out" >&2; fail "rank 0 did not resume from step $step"; }
if [ "$REPLACE" = 1 ]; then
    grep -qE "^\[rank[45]\]: rank [45]: resumed from step $step: 0 of 6 shards on this node" "$T/all.out" ||
        { cat "$T/all.out" >&2; fail "the replacement's ranks did not resume from step $step"; }
fi
got=$(digest_of "$T/all.out")
expect_eq "final weights after losing host 3's shards, resumed from its part's copy, vs fault-free" "$ref" "$got"
note "resumed from step-$step on ${#survivors[@]} hosts (host 3's part from its copy on host 1), digest identical"
stop_server 2>/dev/null || true
assert_no_marked_left "end of test" 10
exit 0
