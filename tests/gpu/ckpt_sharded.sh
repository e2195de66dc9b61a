#!/bin/bash
# Every node's checkpoint with the real torch.distributed.checkpoint, one command from a clean
# tree on the GPU host (PyTorch 2.x there; the trainer runs on the CPU with gloo: what is tested
# is the checkpoint's files, not the GPU):
#
#   tests/gpu/ckpt_sharded.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster built statically on the build host (see ckpt_trainers.sh).
# Three agents on one host (127.0.0.1/2/3), each with its own --checkpoint-dir, 2 ranks each,
# --replicate-checkpoints 1, running tests/gpu/trainers/dcp_sharded.py: dcp.save of
# step-N/ every 5 steps on every rank into its node's directory (DCP spreads the tensors over
# the ranks' files; .metadata on rank 0's node only). Once host 3's part of step-15 is kept on
# host 1, agent 3 and its workers are SIGKILLed; the job must go on with agents 1 and 2 from the
# newest step complete on all shards (host 3's files from their copy), the trainer loading it
# with dcp.load after its ranks exchanged the files their nodes hold, and end with weights
# identical to a fault-free run. About 1-2 minutes. Results in OUT_DIR/summary.txt.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-sharded
OUT=$(cd "$OUT" && pwd -P)
PY=${PYTHON:-python3}
export PYTHON_EXEC=$PY CUDA_VISIBLE_DEVICES=
TR=$SRC/tests/gpu/trainers/dcp_sharded.py
W=$(mktemp -d /tmp/muster-sharded.XXXXXX)
STEPS=60
digest() { sed -n 's/^\[rank0\]: final sha256 \([0-9a-f]*\) step .*/\1/p' "$1" | tail -1; }
descendants() { # descendants PID: every process below PID
    local c
    for c in $(pgrep -P "$1"); do
        echo "$c"
        descendants "$c"
    done
}
log "torch $($PY -c 'import torch; print(torch.__version__)'), $(nproc) cores"

# 1. fault-free reference: one node, 2 ranks (the weights do not depend on the world size)
timeout -k 5 180 "$M" run --standalone --nproc-per-node 2 --preflight off \
    --checkpoint-dir "$W/ref" "$TR" --steps $STEPS > "$W/ref.out" 2> "$W/ref.err"
check "$?" 0 "fault-free run exits 0"
ref=$(digest "$W/ref.out")
log "fault-free digest ${ref:-none}"

# 2. three nodes, separate directories
echo "gpu-sharded-secret" > "$W/tok"
chmod 600 "$W/tok"
"$M" server --listen 127.0.0.1:29571 --token-file "$W/tok" 2> "$W/server.err" &
spid=$!
sleep 0.3
declare -A APID
for k in 1 2 3; do
    timeout -k 5 300 "$M" run --nnodes 2:3 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:29571 \
        --rdzv-id sharded --preflight off --token-file "$W/tok" --local-addr 127.0.0.$k \
        --checkpoint-dir "$W/c$k" --replicate-checkpoints 1 --max-restarts 2 \
        --rdzv-conf join_timeout=60,last_call_timeout=5,heartbeat_timeout=2,keep_alive_interval=0.5 \
        "$TR" --steps $STEPS --step_sleep 0.25 > "$W/a$k.out" 2> "$W/a$k.err" &
    APID[$k]=$!
    sleep 0.3
done
for t in $(seq 480); do
    grep -q "muster-part-3-of-3.step-15 stored as a replica from group rank 2" "$W/a1.err" && break
    sleep 0.25
done
check "$(grep -c 'muster-part-3-of-3.step-15 stored as a replica from group rank 2' "$W/a1.err")" 1 \
    "host 3's part of step-15 kept on host 1"
check "$(grep -c 'checkpoint step-15 recorded as part 2 of 3' "$W/a2.err")" 1 "host 2 recorded its part of step-15"
log "files: host 1 step-15: $(ls -A "$W/c1/step-15" 2>&1 | tr '\n' ' ')"
log "       host 2 step-15: $(ls -A "$W/c2/step-15" 2>&1 | tr '\n' ' ')"
log "       host 3 step-15: $(ls -A "$W/c3/step-15" 2>&1 | tr '\n' ' ')"
# 3. agent 3 and its workers SIGKILLed at once (its directory is gone with it)
pids=$(descendants "${APID[3]}")
kill -9 "${APID[3]}" $pids 2>/dev/null
rm -rf "$W/c3"
kept=$(sed -n 's/^muster: checkpoint \.muster-part-3-of-3\.step-\([0-9]*\) stored as a replica.*/\1/p' \
    "$W/a1.err" | sort -n | tail -1)
log "newest copy of host 3's part on host 1 when it was killed: step-$kept"
wait "${APID[1]}"
rc1=$?
wait "${APID[2]}"
rc2=$?
check "$rc1 $rc2" "0 0" "agents 1 and 2 exit 0"
line=$(grep -h "attempt 1 resumes from" "$W/a1.err" | tail -1)
log "host 1: $line"
step=$(sed -n 's/.*resumes from sharded checkpoint step-\([0-9]*\) .*/\1/p' <<<"$line")
check "$([ -n "$step" ] && [ "$step" -ge "${kept:-999}" ] && echo ok)" ok "resumed from a sharded step >= step-$kept"
cat "$W/a1.out" "$W/a2.out" > "$W/all.out"
log "$(grep -h 'resumed from step' "$W/all.out" | head -4 | tr '\n' ';')"
check "$(digest "$W/all.out")" "$ref" "final weights after losing host 3 equal the fault-free run's"
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
if [ "$FAILS" -ne 0 ]; then
    for f in a1.err a2.err a3.err server.err all.out; do
        echo "--- $f" >> "$OUT/summary.txt"
        tail -40 "$W/$f" >> "$OUT/summary.txt"
    done
fi
rm -rf "$W"
log "result: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
