# shellcheck shell=bash
# Shared helpers for the integration tests. Source it first thing:
#
#     . "$(dirname "$0")/lib.sh"
#
# Contract of a test script: exit 0 pass, 1 fail (with a message on stderr), 77 skip (with the
# reason on stderr). Scripts run under `set -u`, poll conditions instead of sleeping blindly, and
# leave no process behind: every muster started through `mrun`/`mrun_bg` carries a unique marker
# in its environment (MUSTER_IT_MARK), which its workers inherit, and the EXIT trap SIGKILLs
# whatever still carries it.
#
# Environment: MUSTER_BIN (the binary; ctest sets it), MUSTER_SRC (the source tree; defaults to
# two levels above this file). PYTHON for the torch tests is always /usr/bin/python3 (Debian's
# python3-torch), never the `python3` found on PATH.

set -u

IT_NAME=$(basename "$0" .sh)
IT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MUSTER_SRC=${MUSTER_SRC:-$(cd "$IT_DIR/../.." && pwd)}
WORKER="$IT_DIR/worker.sh"
TORCH_PY=/usr/bin/python3

fail() {
    echo "FAIL [$IT_NAME]: $*" >&2
    exit 1
}

skip() {
    echo "SKIP [$IT_NAME]: $*" >&2
    exit 77
}

note() {
    echo "[$IT_NAME] $*" >&2
}

# need_evil_user: for a test where muster runs as root and another local user (nobody) attacks
# it: skips (77) unless root with setpriv (util-linux) and a `nobody` user; sets EVIL_UID and
# EVIL_GID. as_evil CMD...: runs CMD as that user.
need_evil_user() {
    [ "$(id -u)" = 0 ] || skip "needs root: muster runs as root and the attacker as another user"
    command -v setpriv > /dev/null || skip "needs setpriv (util-linux) to act as another user"
    EVIL_UID=$(id -u nobody 2> /dev/null) || skip "needs a 'nobody' user to act as the attacker"
    EVIL_GID=$(id -g nobody)
}
as_evil() { setpriv --reuid="$EVIL_UID" --regid="$EVIL_GID" --clear-groups "$@"; }

# need_cmd CMD [WHY]: skips the test (77) where CMD is not on PATH ("CMD is needed WHY").
need_cmd() {
    command -v "$1" >/dev/null 2>&1 || skip "$1 is needed${2:+ $2}"
}

# need_tool VAR ENV NAME: sets VAR to $ENV, the path of a test tool that CMake builds and passes
# in the environment; skips the test (77) where it is not there ("NAME not built (ENV unset)").
need_tool() {
    printf -v "$1" '%s' "${!2:-}"
    [ -x "${!1}" ] || skip "$3 not built ($2 unset)"
}

if [ -z "${MUSTER_BIN:-}" ]; then
    if [ -x "$MUSTER_SRC/build/muster" ]; then
        MUSTER_BIN="$MUSTER_SRC/build/muster"
    else
        skip "MUSTER_BIN is not set and $MUSTER_SRC/build/muster does not exist"
    fi
fi
[ -x "$MUSTER_BIN" ] || fail "MUSTER_BIN=$MUSTER_BIN is not an executable file"

# Every control connection is TLS keyed by a shared token and multi-node jobs refuse to start
# without one: the servers and agents of a test share this one unless the test sets its own.
export MUSTER_TOKEN=${MUSTER_TOKEN:-it-token-$$-$RANDOM$RANDOM}

# Unique marker for this test run; exported only into muster's own environment (see mrun), so
# the test shell and its helpers (grep, ...) never carry it.
MARK="muster-it-$IT_NAME-$$-$RANDOM$RANDOM"

T=$(mktemp -d "${TMPDIR:-/tmp}/muster-it-$IT_NAME.XXXXXX") || fail "mktemp failed"
printf '%s' "$MARK" > "$T/.mark"

# Prints the pids of live processes whose command line or environment contains the marker
# (default: this test's MARK). The marker is read from a file so grep's own argv lacks it.
marked_pids() {
    local markfile="$T/.mark" p pid state
    if [ $# -gt 0 ]; then
        markfile="$T/.mark.$RANDOM"
        printf '%s' "$1" > "$markfile"
    fi
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" = "$$" ] && continue
        [ "$pid" = "${BASHPID:-$$}" ] && continue
        # zombies have an empty cmdline/environ and cannot be "left running"
        state=$(awk '/^State:/ {print $2; exit}' "$p/status" 2>/dev/null) || continue
        [ "$state" = "Z" ] && continue
        [ -z "$state" ] && continue
        if grep -qaF -f "$markfile" "$p/cmdline" "$p/environ" 2>/dev/null; then
            echo "$pid"
        fi
    done
}

describe_pids() {
    local pid
    for pid in "$@"; do
        printf '  pid %s: %s\n' "$pid" "$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)"
    done
}

kill_marked() {
    local pids
    pids=$(marked_pids)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    return 0
}

IT_BG_PIDS=""
# Functions named in IT_CLEANUP_HOOKS run first on exit (netns.sh registers its teardown here).
IT_CLEANUP_HOOKS=""
it_cleanup() {
    local rc=$?
    local pid hook
    for hook in $IT_CLEANUP_HOOKS; do
        "$hook" || true
    done
    for pid in $IT_BG_PIDS; do
        kill -9 "$pid" 2>/dev/null
    done
    kill_marked
    if [ "${IT_KEEP:-0}" = 1 ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ "${IT_KEEP_ON_FAIL:-0}" = 1 ]; }; then
        echo "[$IT_NAME] kept $T" >&2
    else
        rm -rf "$T"
    fi
    exit "$rc"
}
trap it_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_for TIMEOUT_S CMD [ARGS...]: polls CMD every 20 ms until it succeeds (returns 0) or
# TIMEOUT_S seconds pass (returns 1).
wait_for() {
    local timeout=$1
    shift
    local deadline=$(( $(date +%s%N) + ${timeout%.*} * 1000000000 ))
    while :; do
        "$@" && return 0
        [ "$(date +%s%N)" -ge "$deadline" ] && return 1
        sleep 0.02
    done
}

now_ms() {
    echo $(( $(date +%s%N) / 1000000 ))
}

# no_marked_left [TIMEOUT_S]: succeeds when no marked process exists, polling up to TIMEOUT_S
# (default 0: check once).
no_marked_left() {
    local timeout=${1:-0}
    _none_marked() { [ -z "$(marked_pids)" ]; }
    if [ "$timeout" = 0 ]; then
        _none_marked
    else
        wait_for "$timeout" _none_marked
    fi
}

# assert_no_marked_left CONTEXT [TIMEOUT_S]
assert_no_marked_left() {
    local ctx=$1 timeout=${2:-0}
    if ! no_marked_left "$timeout"; then
        local pids
        pids=$(marked_pids)
        fail "$ctx: processes left running:
$(describe_pids $pids)"
    fi
}

# count_files GLOB...: prints how many of the given paths exist.
count_files() {
    local n=0 f
    for f in "$@"; do
        [ -e "$f" ] && n=$((n + 1))
    done
    echo "$n"
}

# files_at_least N GLOB: succeeds when at least N files match GLOB (unquoted pattern string).
files_at_least() {
    local n=$1 pattern=$2
    local c
    # shellcheck disable=SC2086
    c=$(count_files $pattern)
    [ "$c" -ge "$n" ]
}

# split_assigns [VAR=VALUE...] [--] ARGS...: what mrun, mrun_bg and the helpers built on them
# (ft_run, agent) take apart: IT_ASSIGNS gets the assignments before "--", IT_ARGS the rest.
split_assigns() {
    IT_ASSIGNS=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        IT_ASSIGNS+=("$1")
        shift
    done
    [ "${1:-}" = "--" ] && shift
    IT_ARGS=("$@")
}

# pid_gone PID: PID has exited (gone, or a zombie not reaped yet).
pid_gone() {
    ! kill -0 "$1" 2>/dev/null || [ "$(awk '/^State:/ {print $2}' /proc/"$1"/status 2>/dev/null)" = Z ]
}

# silent_flood ARGS...: tests/peers/silent_conns ARGS (HOST PORT NADDR PER FROM and its options)
# in the background, its output in $T/flood.out|err, its pid in FPID (killed at exit), once it
# says `connected`; skips (77) when the tool is not built or says it cannot run here (the fd
# limit), fails when it does not connect within 40 s.
silent_flood() {
    local flooder
    need_tool flooder SILENT_CONNS silent_conns
    "$flooder" "$@" > "$T/flood.out" 2> "$T/flood.err" &
    FPID=$!
    IT_BG_PIDS="$IT_BG_PIDS $FPID"
    if ! wait_for 40 grep -q '^connected' "$T/flood.out"; then
        wait_for 1 pid_gone "$FPID" && { wait "$FPID"; [ $? = 77 ] && skip "$(cat "$T/flood.err")"; }
        cat "$T/flood.err" >&2
        fail "silent_conns $*: not connected within 40 s"
    fi
}

# mrun [VAR=VALUE...] -- ARGS...: runs `muster ARGS` in the foreground with the marker in its
# environment, a hard timeout (IT_TIMEOUT, default 120 s) and extra environment assignments.
# Sets RC, and leaves stdout/stderr in $T/out and $T/err (or $OUTF/$ERRF if set).
mrun() {
    split_assigns "$@"
    local assigns=(${IT_ASSIGNS[@]+"${IT_ASSIGNS[@]}"})
    set -- ${IT_ARGS[@]+"${IT_ARGS[@]}"}
    local out=${OUTF:-$T/out} err=${ERRF:-$T/err}
    RC=0
    env ${assigns[@]+"${assigns[@]}"} MUSTER_IT_MARK="$MARK" \
        timeout -k 5 "${IT_TIMEOUT:-120}" "$MUSTER_BIN" "$@" > "$out" 2> "$err" || RC=$?
    if [ "$RC" = 124 ]; then
        note "muster $* timed out after ${IT_TIMEOUT:-120}s; stderr:"
        tail -20 "$err" >&2
    fi
    return 0
}

# mrun_bg [VAR=VALUE...] -- ARGS...: starts `muster ARGS` in the background with default
# SIGINT/SIGQUIT dispositions (a non-interactive shell would make background jobs ignore them)
# and sets MPID to muster's own pid (no wrapper in between), output in $OUTF/$ERRF or $T/out,err.
mrun_bg() {
    split_assigns "$@"
    local assigns=(${IT_ASSIGNS[@]+"${IT_ASSIGNS[@]}"})
    set -- ${IT_ARGS[@]+"${IT_ARGS[@]}"}
    local out=${OUTF:-$T/out} err=${ERRF:-$T/err}
    env --default-signal=INT,QUIT,TERM ${assigns[@]+"${assigns[@]}"} MUSTER_IT_MARK="$MARK" \
        "$MUSTER_BIN" "$@" > "$out" 2> "$err" &
    MPID=$!
    IT_BG_PIDS="$IT_BG_PIDS $MPID"
}

# wait_rc PID TIMEOUT_S: waits for a background child; sets RC to its exit status, or fails the
# test when it is still running after TIMEOUT_S.
wait_rc() {
    local pid=$1 timeout=$2
    if ! wait_for "$timeout" pid_gone "$pid"; then
        fail "pid $pid (muster) still running after ${timeout}s"
    fi
    RC=0
    wait "$pid" || RC=$?
}

# envval FILE KEY: prints the value of KEY in an `env` dump (empty if absent; status 1).
envval() {
    local line
    line=$(grep -m1 "^$2=" "$1" 2>/dev/null) || return 1
    printf '%s\n' "${line#*=}"
}

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
    [ "$2" = "$3" ] || fail "$1: expected '$2', got '$3'"
}

# show_tails LABEL OUT_FILE ERR_FILE LINES: the last LINES of a command's stdout and stderr, on
# stderr, headed "--- LABELstdout ---" and "--- LABELstderr ---".
show_tails() {
    echo "--- $1stdout ---" >&2
    tail -n "$4" "$2" >&2
    echo "--- $1stderr ---" >&2
    tail -n "$4" "$3" >&2
}

# show_output [LINES]: the tail of the last mrun's stdout and stderr
show_output() {
    show_tails "" "${OUTF:-$T/out}" "${ERRF:-$T/err}" "${1:-30}"
}

# expect_rc WHAT EXPECTED: compares $RC, showing muster's output on mismatch.
expect_rc() {
    if [ "$RC" != "$2" ]; then
        show_output
        fail "$1: expected exit code $2, got $RC"
    fi
}

have_torch() {
    "$TORCH_PY" -c 'import torch.distributed' >/dev/null 2>&1
}
