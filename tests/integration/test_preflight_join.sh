#!/bin/bash
# The pre-flight's per-GPU results on the rendezvous server, and the pre-flight of a node that
# joins a running elastic job, with the stand-in muster-preflight
# (tests/integration/mock/muster-preflight) and a fake driver directory (2 "GPUs" per node):
#   1. two agents (--nnodes 2:3, 2 workers each, --preflight on) pass the pre-flight; GPU 0 ->
#      GPU 1 is a slow P2P pair on every node (MOCK_P2P_SLOW), named, a warning under
#      --preflight-allow-slow; one console line per node with its GEMM, HBM and P2P figures;
#   2. while the workers run, the server's /status lists each node's GPUs (UUID, model, GEMM,
#      HBM, level) and its P2P summary, and /metrics has muster_preflight_gpu_* samples;
#   3. a third agent joins the running job: it runs the node-local pre-flight (its own KV
#      prefix, its own 2 GPUs) before its workers start, the two others do not run it again,
#      and /status then shows it as "joined";
#   4. a fourth node joins, but its pre-flight fails (a rank of it crashes): it leaves with exit
#      4 after its results reached the server (ok false), and the job goes on without it (one
#      restart round, as for a lost node);
#   5. the job ends normally.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

command -v curl >/dev/null || skip "curl is not installed"
MOCK=$MUSTER_SRC/tests/integration/mock/muster-preflight
FAKE=$T/gpus
mkdir -p "$FAKE/0000:10:00.0" "$FAKE/0000:11:00.0"
unset CUDA_VISIBLE_DEVICES
LOG=$T/mock.log
: >"$LOG"
ENVS=(MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_LOG="$LOG" MOCK_P2P_SLOW=0:1
    NCCL_NVLS_ENABLE=0)

start_job pfjoin
[ -n "$SHTTP" ] || fail "the server printed no 'http on HOST:PORT' line: $(cat "$SERR")"
run_agent() {
    local name=$1
    shift
    agent "$name" "${ENVS[@]}" "$@" -- --nnodes 2:4 --nproc-per-node 2 \
        --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB --max-restarts 3 \
        --rdzv-conf join_timeout=60,last_call_timeout=1 --preflight on --preflight-allow-slow \
        --no-python "$WORKER" hold "$T/w"
}
run_agent a1
run_agent a2
wait_for 60 files_at_least 4 "$T/w/ready.*.0" || { show_all; fail "4 workers did not start"; }
errs=$(cat "$T/a1.err" "$T/a2.err")
# 1. one line per node with P2P, the slow pair named with both GPUs
grep -Eq "preflight: node .*: 2 GPUs: bf16 GEMM 790.0 TFLOP/s, HBM copy 4280.0 GB/s \(read\+write\); .*; P2P min 39.0 GB/s, median 214.5 GB/s over 2 pairs" <<<"$errs" \
    || { show_all; fail "no node line with the P2P figures"; }
[ "$(grep -c "preflight: node .*: 2 GPUs:" <<<"$errs")" = 2 ] || fail "not one line per node: $errs"
grep -q "~ node .*: P2P GPU 0 (GPU-00000000-aaaa-bbbb-cccc-dddddddddddd) -> GPU 1 (GPU-00000001-aaaa-bbbb-cccc-dddddddddddd) 39.0 GB/s is .* below the node.s median 214.5 GB/s of 2 pairs (--preflight-allow-slow: running anyway)" <<<"$errs" \
    || fail "the slow P2P pair was not named: $errs"

# 2. /status and /metrics
http_get "$SHTTP" /status
[ "$HTTP_CODE" = 200 ] || fail "/status answered $HTTP_CODE"
st=$T/st1.json
cp "$T/http.body" "$st"
grep -q '"preflight":\[{' "$st" || fail "no preflight records in /status: $(cat "$st")"
[ "$(grep -o '"uuid":"GPU-0000000[01]-aaaa-bbbb-cccc-dddddddddddd"' "$st" | wc -l)" = 4 ] \
    || fail "/status does not list 2 GPUs on each of 2 nodes: $(cat "$st")"
grep -q '"model":"NVIDIA H200","gemm_tflops":790.0,"hbm_gbps":4280.0,"level":"ok"' "$st" \
    || fail "/status lacks the per-GPU figures: $(cat "$st")"
grep -q '"p2p":{"pairs":2,"min_gbps":39.0,"median_gbps":214.5,"level":"warning","note":"node .*P2P GPU 0' "$st" \
    || fail "/status lacks the P2P summary with its warning: $(cat "$st")"
if command -v jq >/dev/null; then
    jq -e --arg j "$JOB" '.jobs[] | select(.id == $j) | .preflight | length == 2 and
        all(.[]; .ok and (.joined | not) and (.gpus | length) == 2)' "$st" >/dev/null \
        || fail "/status preflight records are not 2 passed nodes of 2 GPUs: $(cat "$st")"
fi
http_get "$SHTTP" /metrics
[ "$HTTP_CODE" = 200 ] || fail "/metrics answered $HTTP_CODE"
cp "$T/http.body" "$T/m1.txt"
H=$(hostname)
grep -q "^muster_preflight_gpu_gemm_tflops{job=\"$JOB\",host=\"$H\",gpu=\"1\",uuid=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\"} 790$" "$T/m1.txt" \
    || fail "no GEMM sample in /metrics: $(grep preflight "$T/m1.txt")"
[ "$(grep -c '^muster_preflight_gpu_hbm_gbps{' "$T/m1.txt")" = 4 ] || fail "not 4 HBM samples"
[ "$(grep -c '^muster_preflight_gpu_level{.*} 0$' "$T/m1.txt")" = 4 ] || fail "not 4 level samples"
grep -q "^muster_preflight_p2p_min_gbps{job=\"$JOB\",host=\"$H\"} 39$" "$T/m1.txt" \
    || fail "no P2P sample: $(grep preflight "$T/m1.txt")"
[ "$(grep -c '^allreduce RANK=[0-9] MUSTER_KV_PREFIX= ' "$LOG")" = 4 ] \
    || fail "round 0's pre-flight did not run once per GPU: $(cat "$LOG")"

# 3. a third node joins the running job
run_agent a3
wait_for 60 files_at_least 2 "$T/w/ready.[45].0" || { show_all; fail "the joining node's workers did not start"; }
grep -q "this node joined the running job in round 1" "$T/a3.err" \
    || { show_agent a3; fail "the joining agent did not say it checks itself"; }
grep -q "preflight: node .* joined the running job: checking its own 2 GPUs" "$T/a3.err" \
    || { show_agent a3; fail "no node-local pre-flight on the joining node"; }
grep -q "preflight: passed" "$T/a3.err" || { show_agent a3; fail "the joining node's pre-flight did not pass"; }
grep -q "~ node .*: P2P GPU 0 .* -> GPU 1" "$T/a3.err" || fail "the joining node's slow pair was not named"
[ "$(grep -c '^allreduce RANK=[01] MUSTER_KV_PREFIX=pfj/2/ ' "$LOG")" = 2 ] \
    || fail "the joining node's GPUs were not checked under its own prefix: $(cat "$LOG")"
grep -q '^p2p RANK=0 MUSTER_KV_PREFIX=pfj/2/ ' "$LOG" || fail "no P2P matrix on the joining node: $(cat "$LOG")"
# round 0 ran 2 inventories, 4 ranks and 2 matrices; nothing more without a prefix
[ "$(grep -c 'MUSTER_KV_PREFIX= ' "$LOG")" = 8 ] \
    || fail "the round's other nodes ran the pre-flight again: $(cat "$LOG")"
# before its workers: the last check started before either of its workers wrote its env
last=$(grep 'MUSTER_KV_PREFIX=pfj/' "$LOG" | tail -1 | awk '{print $NF}' | tr -d .)
for r in 4 5; do
    w=$(date -r "$T/w/env.$r.0" +%s%N)
    [ "$w" -gt "${last:0:19}" ] || fail "worker rank $r started ($w) before the joining node's check ($last)"
done
http_get "$SHTTP" /status
grep -q '"joined":true' "$T/http.body" || fail "/status does not show the joined node's results: $(cat "$T/http.body")"
if command -v jq >/dev/null; then
    jq -e --arg j "$JOB" '.jobs[] | select(.id == $j) | .preflight | length == 3 and
        ([.[] | select(.joined)] | length) == 1 and ([.[] | select(.joined)][0].round == 1)' \
        "$T/http.body" >/dev/null || fail "/status: not 3 records, one joined in round 1: $(cat "$T/http.body")"
fi

# 4. a node whose pre-flight fails on joining leaves; the job goes on without it
run_agent a4 MOCK_FAIL_RANK=1
agent_wait a4 90
expect_agent_rc a4 4
grep -q "rank 1 on node .*: muster-preflight exited with code 1" "$T/a4.err" \
    || { show_agent a4; fail "the joining node's failed rank was not named"; }
grep -q "it leaves the job, which goes on without it" "$T/a4.err" || { show_agent a4; fail "a4 did not say it leaves"; }
grep -q "report: .*muster-$JOB-preflight-join-r[0-9]*-g3.json" "$T/a4.err" \
    || fail "the joining node's report does not have a name of its own: $(cat "$T/a4.err")"
wait_for 60 files_at_least 6 "$T/w/ready.*.1" || { show_all; fail "the 3 remaining nodes did not restart their workers"; }
http_get "$SHTTP" /status
if command -v jq >/dev/null; then
    jq -e --arg j "$JOB" '.jobs[] | select(.id == $j) | (.preflight | length == 4 and
        ([.[] | select(.ok | not)] | length) == 1) and .state == "running" and .world_size == 6' \
        "$T/http.body" >/dev/null || fail "/status after the failed join: $(cat "$T/http.body")"
fi

# 5. the job ends
: >"$T/w/release"
for a in a1 a2 a3; do
    agent_wait $a 60
    expect_agent_rc $a 0
done
stop_server
assert_no_marked_left "after the job" 5
