# shellcheck shell=bash
# Helpers for test_ckpt_trainers_<style>.sh (restart from the last good checkpoint for
# the trainers people actually run). Source it instead of ft.sh, first thing:
#
#     . "$(dirname "$0")/ckpt_trainers.sh"
#
# Each test runs one trainer-style script of tests/integration/trainers/ (nanoGPT, HF Trainer,
# DCP, Lightning: each writes and finds its checkpoints as the real trainer does, and knows
# nothing of muster) twice under `muster run --standalone --nproc-per-node 2 --checkpoint-dir`:
#   1. fault-free: the reference sha256 of the final weights;
#   2. with --max-restarts 30 while trainers/killer.py SIGKILLs workers (mostly rank 0) at random
#      moments and on purpose in the middle of checkpoint writes (>= 20 kills, >= 5 of them
#      leaving a checkpoint incomplete). The job must exit 0 with the same sha256, bit for bit,
#      restart exactly once per kill (a worker crashing on a bad checkpoint would add restarts),
#      and resume from a checkpoint at least once.
# The kills' seed is printed first; CKPT_KILL_SEED=N replays a run's choices (the moments still
# depend on timing). Knobs: CKPT_KILLS (default 20), CKPT_MID_WRITE_MIN (default 5).
#
# It sources ft.sh (lib.sh's contract, ft_run/ft_run_bg, need_torch, resumes_of) and adds:
#   TRAINERS        tests/integration/trainers
#   trainers_init STYLE DEFAULT_SEED    skip without torch; sets STYLE, SCRIPT, SEED (printed)
#   RUN_ENV=(VAR=VALUE...)              extra environment of both runs (default none)
#   run_reference ARGS...               fault-free run; sets REF (the final sha256)
#   run_with_kills KILLER_ARGS... -- RUN_ARGS...
#                                       the faulted run; sets KILLS, MID, OVERWRITES, RESTARTS, GOT
#   final_sha FILE                      rank 0's `final sha256 H` in muster's stdout
#   check_ref_recorded NAME_ERE         the fault-free run recorded complete checkpoints only
#   check_faulted                       the common assertions on the faulted run
#   finish                              the end: REF_PROBLEM, no process left, exit 0

. "$(dirname "${BASH_SOURCE[0]}")/ft.sh"

TRAINERS="$IT_DIR/trainers"
KILLER="$TRAINERS/killer.py"
CKPT_KILLS=${CKPT_KILLS:-20}
CKPT_MID_WRITE_MIN=${CKPT_MID_WRITE_MIN:-5}
CKPT_MAX_RESTARTS=30
RUN_ENV=()

trainers_init() {
    STYLE=$1
    have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
    SCRIPT="$TRAINERS/${STYLE}_style.py"
    [ -f "$SCRIPT" ] || fail "missing $SCRIPT"
    [ -f "$KILLER" ] || fail "missing $KILLER"
    SEED=${CKPT_KILL_SEED:-$2}
    RANDOM=$SEED
    note "seed $SEED (replay with CKPT_KILL_SEED=$SEED)"
}

# final_sha FILE: the hash of rank 0's last `final sha256 H ...` line.
final_sha() {
    sed -n 's/^\[rank0\]: final sha256 \([0-9a-f]\{64\}\) .*/\1/p' "$1" | tail -1
}

# explain_usage_error WHAT: fails with a clear message when muster refused --resume-arg (a build
# older than the option); nothing otherwise.
explain_usage_error() {
    if grep -qE "unknown option '--resume-arg'|resume-arg.*(unknown|unrecognized|invalid)" "$T/err"; then
        show_output 10
        fail "$1: muster run does not accept --resume-arg (a muster older than the option): $(grep -m1 'resume-arg' "$T/err")"
    fi
}

# run_reference RUN-ARGS...: `muster run RUN-ARGS` fault-free on a fresh directory. Its sha256 is
# deterministic, but unlike chaos.sh's reference it is not cached: the run is itself under test
# (nothing resumed or appended on a fresh start, only complete checkpoints recorded).
run_reference() {
    local t0
    t0=$(now_ms)
    IT_TIMEOUT=180 ft_run PYTHONDONTWRITEBYTECODE=1 ${RUN_ENV[@]+"${RUN_ENV[@]}"} -- "$@"
    REF_MS=$(( $(now_ms) - t0 ))
    explain_usage_error "fault-free run"
    expect_rc "fault-free run" 0
    REF=$(final_sha "$T/out")
    [ -n "$REF" ] || { show_output; fail "fault-free run: no 'final sha256 H' line from rank 0"; }
    if grep -q 'resumes from' "$T/err"; then
        show_output
        fail "fault-free run on a fresh directory resumed from something: $(grep -m1 'resumes from' "$T/err")"
    fi
    cp "$T/out" "$T/ref.out"
    cp "$T/err" "$T/ref.err"
    note "fault-free run: sha256 $REF, $REF_MS ms"
}

# run_with_kills KILLER-ARGS... -- RUN-ARGS...: muster in the background, the killer beside it.
run_with_kills() {
    local kargs=() t0 kpid krc=0
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        kargs+=("$1")
        shift
    done
    shift
    t0=$(now_ms)
    ft_run_bg PYTHONDONTWRITEBYTECODE=1 ${RUN_ENV[@]+"${RUN_ENV[@]}"} -- --max-restarts "$CKPT_MAX_RESTARTS" "$@"
    "$TORCH_PY" "$KILLER" --style "$STYLE" --script "$(basename "$SCRIPT")" --mark-file "$T/.mark" \
        --muster-pid "$MPID" --seed "$SEED" --kills "$CKPT_KILLS" --mid-write-min "$CKPT_MID_WRITE_MIN" \
        --max-kills $((CKPT_MAX_RESTARTS - 4)) --progress "$T/out" "${kargs[@]}" > "$T/killer" 2>&1 &
    kpid=$!
    IT_BG_PIDS="$IT_BG_PIDS $kpid"
    wait_rc "$MPID" 360
    wait_for 20 pid_gone "$kpid" || fail "the killer (pid $kpid) still runs 20 s after muster exited"
    wait "$kpid" || krc=$?
    RUN_MS=$(( $(now_ms) - t0 ))
    [ "$krc" = 0 ] || { cat "$T/killer" >&2; fail "the killer failed (exit $krc)"; }
    local summary
    summary=$(sed -n 's/^killer: \([0-9]*\) kills, \([0-9]*\) mid-write (.*), \([0-9]*\) cut a rewrite .*/\1 \2 \3/p' "$T/killer" | tail -1)
    [ -n "$summary" ] || { cat "$T/killer" >&2; fail "no summary line from the killer"; }
    read -r KILLS MID OVERWRITES <<< "$summary"
    RESTARTS=$(grep -c '^muster: restarting workers (restart ' "$T/err")
    GOT=$(final_sha "$T/out")
    note "faulted run: exit $RC, $KILLS kills ($MID mid-write, $OVERWRITES of them over a complete file), $RESTARTS restarts, $(resumes_of "$T/err" | wc -l) resumes, $RUN_MS ms"
}

# show_faulted: the evidence of a failed faulted run, on stderr: the killer's log, muster's own
# lines (the first 40 and the last 60 when there are more), the first worker traceback.
show_faulted() {
    local own n
    echo "--- killer ---" >&2
    cat "$T/killer" >&2
    own=$(grep -v '^\[rank[0-9]*\]: ' "$T/err")
    n=$(echo "$own" | wc -l)
    echo "--- muster's own stderr lines ($n) ---" >&2
    if [ "$n" -le 100 ]; then
        echo "$own" >&2
    else
        echo "$own" | head -40 >&2
        echo "    [... $((n - 100)) lines ...]" >&2
        echo "$own" | tail -60 >&2
    fi
    if grep -q '^\[rank[0-9]*\]: Traceback' "$T/err" "$T/out"; then
        echo "--- the first worker traceback ---" >&2
        cat "$T/err" "$T/out" | grep -A30 -m1 '^\[rank[0-9]*\]: Traceback' | head -31 >&2
    fi
    echo "--- stdout (tail) ---" >&2
    tail -8 "$T/out" >&2
}

# worker_error: the first worker exception ("[rank0]: RuntimeError: ...") that is not a rank's
# reaction to a peer killed (gloo: "Connection closed by peer" and the like), if any.
worker_error() {
    grep -hE '^\[rank[0-9]+\]: [A-Za-z_.]*(Error|Exception)\b' "$T/err" "$T/out" |
        grep -vE 'gloo|Connection (closed|reset)|Broken pipe' | head -1
}

faulted_fail() {
    show_faulted
    fail "seed $SEED: $*${REF_PROBLEM:+ (and the fault-free run: $REF_PROBLEM)}"
}

# check_ref_recorded NAME_ERE: the fault-free run must have recorded checkpoints named NAME_ERE,
# each once complete (over 1 MiB here), not when the file or directory was created. A problem is
# noted in REF_PROBLEM (reported by faulted_fail, and by finish), so the faulted run still shows
# what a restart does.
REF_PROBLEM=""
check_ref_recorded() {
    local lines small
    lines=$(sed -n 's/^muster: checkpoint \([^ ]*\) recorded[^(]*(step [-0-9]*, \([0-9]*\) bytes.*/\1 \2/p' "$T/ref.err" |
        awk -v re="^($1)\$" '$1 ~ re')
    small=$(echo "$lines" | awk '$1 != "" && $2 < 1048576' | head -3 | tr '\n' ',' | sed 's/,$//; s/,/, /g')
    if [ -z "$lines" ]; then
        REF_PROBLEM="no checkpoint matching $1 recorded"
    elif [ -n "$small" ]; then
        REF_PROBLEM="recorded before complete (name bytes): $small"
    fi
    [ -z "$REF_PROBLEM" ] || note "fault-free run: $REF_PROBLEM"
}

# ref_and_killed_runs FRESH_RE RECORDED_RE KILLER-ARGS...: the two runs of a trainer that takes
# --ckpt_dir DIR and ${ARGS[@]} ($STEPS steps), 2 workers standalone. 1. fault-free on
# C0=$T/ref (run_reference): fails the test where its stdout matches FRESH_RE (it resumed on a
# fresh start), then check_ref_recorded RECORDED_RE; 2. the same with kills on C=$T/ckpt
# (run_with_kills KILLER-ARGS), then check_faulted.
ref_and_killed_runs() {
    local fresh_re=$1 recorded_re=$2
    shift 2
    C0="$T/ref"
    run_reference --standalone --nproc-per-node 2 --checkpoint-dir "$C0" "$SCRIPT" --ckpt_dir "$C0" "${ARGS[@]}"
    grep -q "$fresh_re" "$T/out" && { show_output; fail "fault-free run: resumed on a fresh start ('$fresh_re')"; }
    check_ref_recorded "$recorded_re"
    C="$T/ckpt"
    run_with_kills --dir "$C" "$@" --total "$STEPS" -- \
        --standalone --nproc-per-node 2 --checkpoint-dir "$C" "$SCRIPT" --ckpt_dir "$C" "${ARGS[@]}"
    check_faulted
}

# finish: the end of a test.
finish() {
    [ -z "$REF_PROBLEM" ] || fail "fault-free run: $REF_PROBLEM"
    assert_no_marked_left "end of test" 10
    exit 0
}

# check_faulted: exit 0, enough kills, a restart per kill (no other failure), at least one resume
# from a checkpoint, and the final weights of the fault-free run.
check_faulted() {
    local own
    if [ "$RESTARTS" != "$KILLS" ]; then
        own=$(grep -m3 '^muster: restarting workers .*exited with code' "$T/err" | sed 's/^muster: //' | tr '\n' ';')
        faulted_fail "$RESTARTS restarts for $KILLS kills (exit $RC): workers failed by themselves ($own), first error: $(worker_error)"
    fi
    [ "$RC" = 0 ] || faulted_fail "the job with kills exited $RC, not 0"
    [ "$KILLS" -ge "$CKPT_KILLS" ] || faulted_fail "only $KILLS kills (want >= $CKPT_KILLS): did the job end first?"
    [ "$MID" -ge "$CKPT_MID_WRITE_MIN" ] || faulted_fail "only $MID kills in the middle of a checkpoint write (want >= $CKPT_MID_WRITE_MIN)"
    local nres
    nres=$(resumes_of "$T/err" | wc -l)
    [ "$nres" -ge 1 ] || faulted_fail "no attempt resumed from a checkpoint ('muster: attempt K resumes from PATH'): every restart started from scratch; $(grep -m3 -E 'skipped|recorded' "$T/err" | tr '\n' ' ')"
    [ -n "$GOT" ] || faulted_fail "no 'final sha256 H' line from rank 0"
    [ "$GOT" = "$REF" ] || faulted_fail "final sha256 $GOT differs from the fault-free run's $REF"
}

# check_loads SED_SCRIPT: what rank 0 says it loaded (sed -n SED_SCRIPT on muster's stdout prints
# one path per load) against muster's "attempt K resumes from PATH" lines: every path loaded was
# announced, no more loads than announcements (a kill while torch is imported comes before the
# trainer's line), and the last attempt, the one that finished, resumed from what muster
# announced for it.
check_loads() {
    local loads ann last_ann last_k p
    loads=$(sed -n "$1" "$T/out")
    ann=$(resumes_of "$T/err")
    for p in $loads; do
        echo "$ann" | cut -d' ' -f2- | grep -qxF -- "$p" || faulted_fail "rank 0 loaded $p, which muster never announced"
    done
    [ "$(echo "$loads" | grep -c .)" -le "$(echo "$ann" | grep -c .)" ] \
        || faulted_fail "rank 0 loaded $(echo "$loads" | grep -c .) times, muster announced $(echo "$ann" | grep -c .) resumes"
    last_ann=$(echo "$ann" | tail -1)
    last_k=${last_ann%% *}
    [ "$last_k" = "$RESTARTS" ] || faulted_fail "the last attempt ($RESTARTS) did not resume (the last resume was attempt $last_k)"
    expect_eq "the last attempt: the path rank 0 loaded vs the one muster announced" "${last_ann#* }" "$(echo "$loads" | tail -1)"
}

# resumed_paths: the distinct paths of the "attempt K resumes from PATH" lines.
resumed_paths() {
    resumes_of "$T/err" | cut -d' ' -f2- | sort -u
}

# other_fs_tmpdir: prints a fresh directory on a file system other than $T's (for $TMPDIR), or
# nothing when there is none (it is removed on exit).
other_fs_tmpdir() {
    local d dev_t cand
    dev_t=$(stat -c %d "$T")
    for cand in /dev/shm /run/user/$(id -u) /var/tmp /tmp; do
        if [ ! -d "$cand" ] || [ ! -w "$cand" ]; then continue; fi
        [ "$(stat -c %d "$cand")" != "$dev_t" ] || continue
        d=$(mktemp -d "$cand/muster-it-$IT_NAME.XXXXXX") || continue
        echo "$d"
        return 0
    done
    return 0
}
