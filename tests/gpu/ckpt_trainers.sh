#!/bin/bash
# Checkpoints written the way real trainers write them, on one GPU, one command from a
# clean tree:
#
#   tests/gpu/ckpt_trainers.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster built statically on the build host (the GPU host has no libuv/mbedTLS/
# jansson/xxhash):
#   cmake -S . -B build-gpu -DMUSTER_STATIC_DEPS=ON -DMUSTER_PREFLIGHT_GPU=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpu -j2 --target muster
# The host's python3 needs PyTorch, transformers and accelerate (for the Trainer); nothing is
# downloaded (models from configs, synthetic token data).
#
# Two trainers under tests/gpu/trainers/, neither of which knows muster:
#   hf       hf_gpt2.py: transformers' Trainer + TrainingArguments, a GPT-2 from GPT2Config,
#            checkpoint-N/ directories every 150 steps (trainer_state.json written last), resumed
#            with --resume_from_checkpoint PATH; muster adds
#            --resume-arg --resume_from_checkpoint --resume-arg {}
#   nanogpt  nanogpt.py: a nanoGPT-style GPT in plain PyTorch with AdamW, torch.save of
#            out_dir/ckpt.pt IN PLACE every 200 iterations, resumed with --init_from=resume;
#            muster adds --resume-arg --init_from=resume
# For each: a fault-free run (the reference losses), then a run under
#   muster run --checkpoint-dir DIR --checkpoint-settle S --max-restarts 3 --resume-arg ...
# during which tests/gpu/trainers/killer.py SIGKILLs the worker twice:
#   1. mid-training, some steps after muster logged the first checkpoint as recorded: the next
#      attempt must resume from it;
#   2. while a later checkpoint is being written (nanogpt: ckpt.pt torn by the kill, muster must
#      restore its last good copy before the restart and log "restored"; hf: checkpoint-N/
#      without trainer_state.json, muster must pass the previous, complete one): the next
#      attempt must resume from the last recorded checkpoint.
# Then every loss the run printed is compared with the reference's loss of the same step
# (tests/gpu/trainers/compare.py): exact at the printed precision (6 decimals) is the goal,
# |diff| <= LOSS_TOL (default 1e-3) passes (CUDA kernels can differ between processes; the
# trainers ask for determinism: CUBLAS_WORKSPACE_CONFIG=:4096:8, cudnn.deterministic,
# torch.use_deterministic_algorithms(True, warn_only=True), no dropout, no fused attention).
#
# One worker (--nproc-per-node 1): one GPU cannot hold two NCCL ranks (NCCL refuses a duplicate
# GPU, and muster's pre-flight refuses two workers on one GPU), and the checkpoints are rank
# 0's business anyway; a single rank also gives a reference that is the same program. The
# pre-flight is off (--preflight off): it is not what is tested here, and it costs device time.
# Knobs: CKPT_TRAINERS ("hf nanogpt"), CKPT_SETTLE (0.5 s, passed as --checkpoint-settle),
# LOSS_TOL, PYTHON (python3), NANOGPT_ARGS / HF_ARGS (extra trainer arguments, e.g. a smaller
# model for a dry run on a CPU machine: NANOGPT_ARGS="--device=cpu --n_layer=2 ...").
# About 2-3 minutes of device time. Results: OUT_DIR/summary.txt (the table at its end is meant
# for docs/BENCHMARKS.md), per trainer OUT_DIR/NAME/{ref,run}.log, kills.txt, compare.txt.
# Exit 0 when every check passed.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-ckpt
OUT=$(cd "$OUT" && pwd -P)
PY=${PYTHON:-python3}
export PYTHON_EXEC=$PY
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-0}
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
SETTLE=${CKPT_SETTLE:-0.5}
TOL=${LOSS_TOL:-1e-3}
TR=$SRC/tests/gpu/trainers
read -r -a NG_EXTRA <<< "${NANOGPT_ARGS:-}"
read -r -a HF_EXTRA <<< "${HF_ARGS:-}"
: > "$OUT/summary.txt"

log "# muster checkpoints of real trainers $(date -u +%FT%TZ) on $(hostname)"
log "$(nproc) cores, $(uname -r), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"); muster $("$M" --version 2>&1 | head -1)"
nvidia-smi -L 2>/dev/null | head -1 | tee -a "$OUT/summary.txt"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1 | tee -a "$OUT/summary.txt"
"$PY" -c 'import transformers, accelerate; print("transformers", transformers.__version__, "accelerate", accelerate.__version__)' 2>&1 | tail -1 | tee -a "$OUT/summary.txt"
log "fs of $OUT: $(stat -f -c %T "$OUT")"

help=$("$M" run --help 2>&1)
for flag in --resume-arg --checkpoint-settle; do
    grep -q -- "$flag" <<<"$help" || { log "FAIL this muster has no $flag (a build older than the option)"; exit 1; }
done

nanogpt_cmd() { CMD=("$TR/nanogpt.py" "--out_dir=$1" ${NG_EXTRA[@]+"${NG_EXTRA[@]}"}); }
hf_cmd() { CMD=("$TR/hf_gpt2.py" --output_dir "$1" ${HF_EXTRA[@]+"${HF_EXTRA[@]}"}); }
ROWS=()

# ckpt_case NAME CMDFN PLAN RESUME-ARGS...: the reference, the run with kills, the checks
ckpt_case() {
    local name=$1 cmdfn=$2 plan=$3 d=$OUT/$1 t rc tm krc
    shift 3
    rm -rf "$d"
    mkdir -p "$d"
    log "## $name: kills $plan; muster adds $*"

    "$cmdfn" "$d/ref"
    t=$(date +%s%N)
    timeout -k 5 150 "$M" run --standalone --nproc-per-node 1 --preflight off "${CMD[@]}" >"$d/ref.log" 2>&1
    rc=$?; tm=$(ms "$t")
    check "$rc" 0 "$name: fault-free reference run (${tm} ms)"
    local ref_ms=$tm
    [ "$rc" = 0 ] || { tail -20 "$d/ref.log" >>"$OUT/summary.txt"; return; }
    grep -m1 'start:' "$d/ref.log" | sed 's/^\[rank0\]: //' | while read -r l; do log "  $l"; done

    "$cmdfn" "$d/ckpt"
    t=$(date +%s%N)
    timeout -k 5 240 "$M" run --standalone --nproc-per-node 1 --preflight off --checkpoint-dir "$d/ckpt" \
        --checkpoint-settle "$SETTLE" --max-restarts 3 "$@" "${CMD[@]}" >"$d/run.log" 2>&1 &
    local mpid=$!
    "$PY" "$TR/killer.py" --log "$d/run.log" --dir "$d/ckpt" --kind "$name" --plan "$plan" \
        --muster-pid "$mpid" --timeout 230 --result "$d/kills.txt" >"$d/killer.out" 2>&1 &
    local kpid=$!
    wait "$mpid"
    rc=$?; tm=$(ms "$t")
    wait "$kpid"
    krc=$?
    check "$rc" 0 "$name: run with kills finished (${tm} ms)"
    while read -r l; do log "  $l"; done <"$d/kills.txt"
    [ "$krc" = 0 ] || log "  killer exit $krc: $(tail -1 "$d/killer.out")"

    # kill 1 must have happened; kill 2 (during a write) is timed against the file system and
    # may be missed: then it is reported, not counted
    local n_kills expects
    n_kills=$(grep -c 'expect resume from' "$d/kills.txt")
    expects=$(sed -n 's/.*expect resume from \([0-9]*\).*/\1/p' "$d/kills.txt" | tr '\n' ' ')
    grep -q '^kill 1: .*expect resume from' "$d/kills.txt"; check $? 0 "$name: killed mid-training after a recorded checkpoint"
    if grep -q '^kill 2: .*expect resume from' "$d/kills.txt"; then
        log "PASS $name: killed while a checkpoint was being written"
    else
        log "SKIP $name: the kill during a checkpoint write was not timed: $(grep '^kill 2' "$d/kills.txt")"
    fi

    "$PY" "$TR/compare.py" --kind "$name" --tol "$TOL" "$d/ref.log" "$d/run.log" >"$d/compare.txt" 2>&1
    local crc=$?
    while read -r l; do log "  $l"; done <"$d/compare.txt"
    local starts want
    starts=$(sed -n 's/^starts: //p' "$d/compare.txt")
    want=$(echo "0 $expects" | xargs)
    check "$starts" "$want" "$name: each attempt started from the checkpoint expected (first steps)"
    check "$crc" 0 "$name: every reference step printed, losses within $TOL of the reference"
    local total exact maxd
    read -r total exact maxd < <(sed -n 's/^total: \([0-9]*\) compared, \([0-9]*\) exact, max |diff| \([0-9.]*\).*/\1 \2 \3/p' "$d/compare.txt")
    if [ -n "${exact:-}" ] && [ "$exact" = "$total" ]; then log "  losses exact at 6 decimals: all $total"
    else log "  losses exact at 6 decimals: ${exact:-?} of ${total:-?} (max |diff| ${maxd:-?})"; fi

    # the resume arguments muster appended, as the trainer saw them
    local resumed
    if [ "$name" = hf ]; then
        local p e want_paths="none"
        resumed=$(grep -o 'resume_from [^ ,]*' "$d/run.log" | sed 's/resume_from //' |
            while read -r p; do if [ "$p" = none ]; then echo none; else readlink -f "$p"; fi; done | xargs)
        for e in $expects; do want_paths="$want_paths $d/ckpt/checkpoint-$e"; done
        check "$resumed" "$want_paths" "$name: --resume_from_checkpoint was the verified checkpoint directory"
    else
        resumed=$(grep -o 'init_from [a-z]*' "$d/run.log" | sed 's/init_from //' | tr '\n' ' ' | xargs)
        check "$resumed" "$(echo "scratch $expects" | sed 's/[0-9][0-9]*/resume/g' | xargs)" "$name: --init_from=resume appended only when resuming"
    fi
    local recorded restored
    recorded=$(grep -c 'muster: checkpoint .* recorded' "$d/run.log")
    restored=$(grep -c 'restored' "$d/run.log")
    grep 'muster: checkpoint .*\(recorded\|restored\|skipped\)' "$d/run.log" | head -12 | while read -r l; do log "  $l"; done
    if [ "$name" = nanogpt ] && [ "$n_kills" -ge 2 ]; then
        [ "$restored" -ge 1 ]; check $? 0 "$name: the torn ckpt.pt was restored before the restart (log line with \"restored\")"
    fi
    local step_ms save_ms
    step_ms=$(sed -n 's/.*\(iter\|step\) [0-9]*:* loss [0-9.]*,* time \([0-9.]*\) *ms.*/\2/p' "$d/ref.log" | tail -n +5 | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "?"}')
    save_ms=$(sed -n 's/.*saved checkpoint at iter [0-9]*, [0-9]* bytes, \([0-9]*\) ms/\1/p' "$d/ref.log" | tr '\n' ' ')
    log "  reference: median step ${step_ms} ms${save_ms:+, torch.save of ckpt.pt ${save_ms}ms}; checkpoints recorded in the run: $recorded; restored lines: $restored"
    ROWS+=("| $name | $n_kills ($plan) | ${starts// / → } | ${total:-?} | ${exact:-?} | ${maxd:-?} | $restored | ${ref_ms} / ${tm} ms |")
}

for tr in ${CKPT_TRAINERS:-hf nanogpt}; do
    case $tr in
    hf) ckpt_case hf hf_cmd after-record:30,during-write --resume-arg --resume_from_checkpoint --resume-arg '{}' ;;
    nanogpt) ckpt_case nanogpt nanogpt_cmd after-record:10,during-write --resume-arg --init_from=resume ;;
    *) log "FAIL unknown trainer $tr"; FAILS=$((FAILS + 1)) ;;
    esac
done

log ""
log "## summary (docs/BENCHMARKS.md)"
log "| trainer | kills | first step of each attempt | losses compared | exact (6 decimals) | max abs diff | \"restored\" lines | wall: reference / with kills |"
log "|---|---|---|---:|---:|---:|---:|---|"
for r in ${ROWS[@]+"${ROWS[@]}"}; do log "$r"; done
log "# $FAILS failed"
[ "$FAILS" = 0 ]
