# shellcheck shell=bash
# Helpers for the fault-tolerance tests (test_ft_*.sh: checkpoint registry and resume,
# hang detection, pre-emption, Slurm defaults). Source it instead of lib.sh, first thing:
#
#     . "$(dirname "$0")/ft.sh"
#
# It sources lib.sh (the test contract, mrun/mrun_bg, the marker-based cleanup) and adds:
#   CKPT_PY        examples/pytorch/train_ckpt.py (the checkpointing example)
#   FT_WORKER      tests/integration/ft_worker.sh (a fake worker that writes checkpoints, beats
#                  and records MUSTER_RESUME_FROM; see its header)
#   FT_CLEAN_ENV   `env` arguments removing every SLURM_* and PET_* variable the test was started
#                  with, so a CI job that itself runs under Slurm does not change what is tested
#   need_torch     skip (77) unless Debian's PyTorch can import torch.distributed

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CKPT_PY="$MUSTER_SRC/examples/pytorch/train_ckpt.py"
FT_WORKER="$IT_DIR/ft_worker.sh"
[ -f "$FT_WORKER" ] || fail "missing $FT_WORKER"

FT_CLEAN_ENV=()
for _v in $(compgen -e); do
    case "$_v" in
    SLURM_* | PET_*) FT_CLEAN_ENV+=(-u "$_v") ;;
    esac
done
unset _v

need_torch() {
    have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
    [ -f "$CKPT_PY" ] || fail "missing $CKPT_PY"
}

# ft_run [VAR=VALUE...] -- RUN-ARGS...: `muster run RUN-ARGS` in the foreground (see mrun) with
# Debian's Python and without the caller's SLURM_*/PET_* variables.
ft_run() {
    split_assigns "$@"
    mrun "${FT_CLEAN_ENV[@]}" PYTHON_EXEC="$TORCH_PY" ${IT_ASSIGNS[@]+"${IT_ASSIGNS[@]}"} \
        -- run ${IT_ARGS[@]+"${IT_ARGS[@]}"}
}

# ft_run_bg: the same in the background (see mrun_bg; sets MPID).
ft_run_bg() {
    split_assigns "$@"
    mrun_bg "${FT_CLEAN_ENV[@]}" PYTHON_EXEC="$TORCH_PY" ${IT_ASSIGNS[@]+"${IT_ASSIGNS[@]}"} \
        -- run ${IT_ARGS[@]+"${IT_ARGS[@]}"}
}

# params_of FILE: the params hash of rank 0's `done:` line in FILE (muster's stdout).
params_of() {
    sed -n 's/^\[rank0\]: done: .* params \([0-9a-f][0-9a-f]*\)$/\1/p' "$1" | tail -1
}

# recorded FILE: the names muster recorded ("muster: checkpoint NAME recorded ..."), in order.
recorded() {
    sed -n 's/^muster: checkpoint \([^ ]*\) recorded.*/\1/p' "$1"
}

# resumes_of FILE: the "muster: attempt K resumes from PATH" lines of FILE, as "K PATH".
resumes_of() {
    sed -n 's/^muster: attempt \([0-9][0-9]*\) resumes from \(.*\)$/\1 \2/p' "$1"
}

# ckpts_in DIR: the checkpoint entries in DIR (names not starting with a dot), sorted.
ckpts_in() {
    (cd "$1" && ls -A | grep -v '^\.' | sort)
}

# grep_in FILE PATTERN: grep -q -- PATTERN FILE (a predicate for wait_for).
grep_in() {
    grep -q -- "$2" "$1" 2>/dev/null
}

# stderr_has WHAT PATTERN [FILE]: fails unless muster's stderr matches the fixed string PATTERN.
stderr_has() {
    grep -qF -- "$2" "${3:-${ERRF:-$T/err}}" || { show_output 40; fail "$1: stderr lacks '$2'"; }
}

# stdout_has WHAT PATTERN [FILE]: the same for muster's stdout.
stdout_has() {
    grep -qF -- "$2" "${3:-${OUTF:-$T/out}}" || { show_output 40; fail "$1: stdout lacks '$2'"; }
}

# corrupt_append FILE: appends bytes (size and checksum change: "grown").
corrupt_append() {
    printf 'garbage' >> "$1"
}

# corrupt_truncate FILE: drops the last 100 bytes (or half of a smaller file).
corrupt_truncate() {
    local s
    s=$(stat -c %s "$1")
    if [ "$s" -gt 200 ]; then
        truncate -s $((s - 100)) "$1"
    else
        truncate -s $((s / 2)) "$1"
    fi
}

# corrupt_flip FILE: inverts one byte in the middle; the size stays (only the checksum differs).
corrupt_flip() {
    local s off b
    s=$(stat -c %s "$1")
    off=$((s / 2))
    b=$(od -An -tu1 -j "$off" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $((255 - b)))" | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}

# reg_field DIR NAME FIELD: FIELD (checksum, size, step) of NAME in DIR/.muster/registry.json;
# empty when NAME is not registered.
reg_field() {
    "$TORCH_PY" -c '
import json, sys
d, name, field = sys.argv[1:4]
try:
    reg = json.load(open(d + "/.muster/registry.json"))
except OSError:
    sys.exit(0)
for e in reg.get("entries", []):
    if e.get("name") == name:
        print(e.get(field, ""))
        break
' "$1" "$2" "$3"
}

# reg_names DIR: the names in DIR/.muster/registry.json, newest first, one per line.
reg_names() {
    "$TORCH_PY" -c '
import json, sys
try:
    reg = json.load(open(sys.argv[1] + "/.muster/registry.json"))
except OSError:
    sys.exit(0)
for e in reg.get("entries", []):
    print(e["name"])
' "$1"
}
