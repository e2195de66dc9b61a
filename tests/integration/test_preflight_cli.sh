#!/bin/bash
# `muster preflight` / `muster run --preflight` without a GPU, and the pre-flight's reports with
# a stand-in muster-preflight (tests/integration/mock/muster-preflight) and a fake driver
# directory (MUSTER_NVIDIA_PROC_DIR) that make this machine look like one with 2 GPUs:
#   - no GPU, no --nproc-per-node: exit 5 with one line; bad flags: exit 2 with one line
#   - a CPU-only single-node pre-flight passes, and `muster run --preflight on` then runs
#   - two nodes whose NCCL versions differ: exit 4, the table marks the difference and names both
#     nodes; --preflight-allow-mixed: passes with a warning
#   - a rank whose muster-preflight crashes: exit 4 naming the rank, node and GPU; the workers
#     of `muster run` never start
#   - busbw below --preflight-min-busbw: exit 4 with the figure
#   - auto skips (and says so) when there are more workers than GPUs; on then fails naming it
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

expect_one_line_error() {
    [ "$(wc -l <"$T/err")" = 1 ] && grep -q -- "$1" "$T/err" \
        || fail "expected one error line with '$1', got: $(cat "$T/err")"
}

MOCK=$MUSTER_SRC/tests/integration/mock/muster-preflight
FAKE=$T/gpus
mkdir -p "$FAKE/0000:10:00.0" "$FAKE/0000:11:00.0"
GPUENV=(MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK")
unset CUDA_VISIBLE_DEVICES

# --- without a GPU ---
MUSTER_NVIDIA_PROC_DIR=$T/none mrun -- preflight
expect_rc "step 1" 5
expect_one_line_error "no NVIDIA GPU on this node"
mrun -- preflight --nproc-per-node 1 --preflight-timeout 0.1
expect_rc "step 2" 2
expect_one_line_error "--preflight-timeout"
mrun -- run --preflight sometimes --no-python /bin/true
expect_rc "step 3" 2
expect_one_line_error "--preflight must be auto, on or off"
mrun -- preflight --nproc-per-node 2
expect_rc "step 4" 0
grep -q "preflight: passed" "$T/err" || fail "CPU-only pre-flight did not pass: $(cat "$T/err")"
mkdir -p "$T/w"
mrun -- run --preflight on --nproc-per-node 2 --no-python "$WORKER" dump "$T/w"
expect_rc "step 5" 0
check_ranks "$T/w" 0 2 1

# --- a node "with 2 GPUs" (fake driver directory, stand-in muster-preflight) ---
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" -- preflight --log-dir "$T/logs" \
    --rdzv-id one-$$
expect_rc "step 6" 0
grep -q "NCCL all-reduce over 2 ranks" "$T/err" || fail "no NCCL table: $(cat "$T/err")"
[ -s "$T/logs/one-$$/preflight.json" ] || fail "no JSON report in the log dir"
grep -q '"nccl"' "$T/logs/one-$$/preflight.json" || fail "the JSON report lacks the NCCL stage"
# the P2P matrix: in the node's line and in the report, per GPU pair
grep -q "preflight: node .*: 2 GPUs: .*; P2P min 390.0 GB/s, median 390.0 GB/s over 2 pairs" "$T/err" \
    || fail "no P2P figures in the node line: $(cat "$T/err")"
grep -q '"p2p":{"gpus":\[{"index":0,"uuid":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"}' \
    <(tr -d ' \n' <"$T/logs/one-$$/preflight.json") || fail "the report lacks the P2P matrix"
if command -v jq >/dev/null; then
    jq -e '.nccl[0].p2p.gbps == [[0, 390.0], [390.0, 0]] and .nccl[0].p2p.pairs == 2 and
        (.nccl[0].ranks | length) == 2 and all(.nccl[0].ranks[]; .health.gemm_tflops == 790.0) and
        .gpu_health.findings == []' "$T/logs/one-$$/preflight.json" >/dev/null \
        || fail "report: per-GPU or P2P entries wrong: $(cat "$T/logs/one-$$/preflight.json")"
fi
# a slow pair fails, named with node, both GPUs (index, UUID) and its figure; in the report too
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_P2P_SLOW=1:0 -- preflight \
    --log-dir "$T/logs" --rdzv-id p2p-$$
expect_rc "a slow P2P pair" 4
grep -q "! node .*: P2P GPU 1 (GPU-00000001-aaaa-bbbb-cccc-dddddddddddd) -> GPU 0 (GPU-00000000-aaaa-bbbb-cccc-dddddddddddd) 39.0 GB/s is 81.8 % below the node's median 214.5 GB/s of 2 pairs" "$T/err" \
    || fail "the slow pair was not named: $(cat "$T/err")"
if command -v jq >/dev/null; then
    jq -e '.ok == false and (.reason | startswith("slow GPU link: node ")) and
        [.gpu_health.findings[] | select(.p2p == [1, 0] and .level == "failure")] != []' \
        "$T/logs/p2p-$$/preflight.json" >/dev/null || fail "report: the slow pair is not a finding"
fi
# one GPU: no matrix, said so, no figures
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_P2P_SLOW=1:0 -- preflight \
    --nproc-per-node 1 --log-dir "$T/logs" --rdzv-id p2p1-$$
expect_rc "P2P with one GPU" 0
grep -q "preflight: node .*: 1 GPU: .*; P2P skipped: one GPU: no peer-to-peer pairs to measure" "$T/err" \
    || fail "one GPU: no P2P skip note: $(cat "$T/err")"
grep -q "P2P min" "$T/err" && fail "one GPU printed P2P figures: $(cat "$T/err")"
grep -q '"skipped"' "$T/logs/p2p1-$$/preflight.json" || fail "one GPU: the report does not say P2P was skipped"

# auto: 4 workers on a 2-GPU node are no one-GPU-per-worker job, so no pre-flight (said so);
# --preflight on checks anyway and finds too few GPUs
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" -- run --nproc-per-node 4 \
    --no-python /bin/true
expect_rc "auto with 4 workers on 2 GPUs" 0
grep -q "pre-flight skipped: 4 workers but 2 GPUs" "$T/err" || fail "no skip line: $(cat "$T/err")"
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" -- run --nproc-per-node 4 \
    --preflight on --no-python /bin/true
expect_rc "--preflight on with 4 workers on 2 GPUs" 4
grep -q "has 2 GPUs, its 4 workers need 4" "$T/err" || fail "too few GPUs not named: $(cat "$T/err")"

# a rank crashes before init: named with its node and GPU; no worker starts
rm -rf "$T/w"; mkdir -p "$T/w"
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_FAIL_RANK=1 -- \
    run --nproc-per-node 2 --max-restarts 3 --no-python "$WORKER" dump "$T/w"
expect_rc "step 7" 4
grep -q "rank 1 on node .*: muster-preflight exited with code 1" "$T/err" \
    || fail "the crashed rank was not named: $(cat "$T/err")"
[ -z "$(ls "$T/w")" ] || fail "workers started although the pre-flight failed"
grep -q "restarting" "$T/err" && fail "a failed pre-flight must not be restarted"

# busbw floor
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_BUSBW=100.0 -- \
    preflight --preflight-min-busbw 250
expect_rc "step 8" 4
grep -q "busbw 100.0 GB/s at 256 MiB is below --preflight-min-busbw 250.0" "$T/err" \
    || fail "the busbw floor was not reported: $(cat "$T/err")"
# one rank: no bandwidth figures, and the busbw floor is not applied
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_BUSBW=100.0 -- \
    preflight --nproc-per-node 1 --preflight-min-busbw 250
expect_rc "one rank with a busbw floor" 0
grep -q "over 1 rank: sum exact; no bandwidth figures" "$T/err" || fail "one rank: $(cat "$T/err")"
grep -qE "algbw| us +[0-9.]+ GB/s" "$T/err" && fail "one rank printed bandwidth figures: $(cat "$T/err")"
grep -q "min-busbw 250.0 not applied" "$T/err" || fail "floor not said to be skipped: $(cat "$T/err")"

# a slow GPU: more than 10 % below the median of its model fails, named with node,
# index, UUID and figure; --preflight-allow-slow warns; an NVML failure always fails
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_SLOW_RANK=1 -- preflight
expect_rc "slow GPU" 4
grep -q "! node .*, GPU 1 (GPU-00000001-aaaa-bbbb-cccc-dddddddddddd): bf16 GEMM 474.0 TFLOP/s is .* below the median 632.0 of 2 NVIDIA H200" "$T/err" \
    || fail "the slow GPU was not named: $(cat "$T/err")"
grep -q "node .*: 2 GPUs: bf16 GEMM 474.0-790.0 TFLOP/s" "$T/err" || fail "no node line: $(cat "$T/err")"
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_SLOW_RANK=1 -- preflight \
    --preflight-allow-slow
expect_rc "slow GPU with --preflight-allow-slow" 0
grep -q "~ node .*GPU 1 .*allow-slow: running anyway" "$T/err" || fail "no warning: $(cat "$T/err")"
mrun MUSTER_NVIDIA_PROC_DIR="$FAKE" MUSTER_PREFLIGHT_BIN="$MOCK" MOCK_NVML_FAIL_RANK=0 -- preflight \
    --preflight-allow-slow --preflight-min-tflops 800
expect_rc "NVML failure and a floor" 4
grep -q "! node .*, GPU 0 (GPU-0.*): 1 uncorrectable ECC error" "$T/err" || fail "NVML: $(cat "$T/err")"
grep -q "below --preflight-min-tflops 800.0" "$T/err" || fail "floor: $(cat "$T/err")"

# --- two nodes with different NCCL versions ---
start_server
for mixed in no yes; do
    extra=()
    [ $mixed = yes ] && extra=(--preflight-allow-mixed)
    for i in 1 2; do
        nccl=22809
        [ $i = 2 ] && nccl=22703
        agent m$mixed$i "${GPUENV[@]}" MOCK_NCCL=$nccl -- --nnodes 2 --nproc-per-node 2 \
            --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id mix-$mixed-$$ --preflight on \
            ${extra[@]+"${extra[@]}"} --rdzv-conf join_timeout=30 --no-python /bin/true
    done
    for i in 1 2; do
        agent_wait m$mixed$i 60
    done
    errs=$(cat "$T/m${mixed}1.err" "$T/m${mixed}2.err")
    if [ $mixed = no ]; then
        expect_agent_rc m${mixed}1 4
        expect_agent_rc m${mixed}2 4
        # group rank 0 is whichever node joined first: the other one's cell is marked
        grep -Eq "2\.(27\.3|28\.9)\*" <<<"$errs" || fail "the differing NCCL cell is not marked: $errs"
        grep -Eq "NCCL differs: .* \(group rank 1\) has 2\.2[78]\.[39], .* \(group rank 0\) has 2\.2[78]\.[39]" \
            <<<"$errs" || fail "the NCCL difference was not named: $errs"
    else
        expect_agent_rc m${mixed}1 0
        expect_agent_rc m${mixed}2 0
        grep -q "~ NCCL differs" <<<"$errs" || fail "no warning with --preflight-allow-mixed: $errs"
    fi
done
stop_server
assert_no_marked_left "after the pre-flights" 5
