#!/bin/bash
# Token files and secrets in memory: a FIFO as token file makes `muster run`,
# `muster server`, `muster status` and `muster preflight` fail at once with one line (it hung
# them); a MUSTER_TOKEN or token file over 256 characters is refused with one line and exit 2
# (the server cut it short); a Kubernetes-style symlinked token (token -> ..data/token, ..data ->
# ..TIMESTAMP) works for a server, an agent and status; a running agent is not dumpable (as an
# unprivileged user its /proc/PID/environ becomes root's, its workers' stay the user's) unless
# MUSTER_ALLOW_CORE_DUMPS=1; gdb's gcore leaves the agent's secret region out of the core.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

NOBODY=65534

# one_line FILE WHAT PATTERN: FILE (stderr) is exactly one line and contains PATTERN.
one_line() {
    [ "$(wc -l < "$1")" = 1 ] || { cat "$1" >&2; fail "$2: expected one line on stderr"; }
    grep -qF -- "$3" "$1" || { cat "$1" >&2; fail "$2: no '$3' in the error"; }
}

# cmd_args CMD TOKEN_ARGS...: argv of a muster command that needs a token, refused before it
# reaches any network (the endpoint is never contacted).
cmd_args() {
    local cmd=$1
    shift
    case $cmd in
    run) ARGS=(run --nnodes 2 --rdzv-endpoint 127.0.0.1:29999 --rdzv-id tf "$@" --no-python /bin/true) ;;
    preflight) ARGS=(preflight --nproc-per-node 1 --nnodes 2 --rdzv-endpoint 127.0.0.1:29999 --rdzv-id tf "$@") ;;
    server) ARGS=(server --listen 127.0.0.1:0 "$@") ;;
    status) ARGS=(status --rdzv-endpoint 127.0.0.1:29999 "$@") ;;
    esac
}

# 1. a FIFO: refused at once (a plain open would wait for a writer forever), one line
mkfifo "$T/fifo"
for cmd in run server status preflight; do
    cmd_args $cmd --token-file "$T/fifo"
    t0=$(now_ms)
    ERRF=$T/fifo.$cmd.err IT_TIMEOUT=20 mrun -u MUSTER_TOKEN -- "${ARGS[@]}"
    ms=$(($(now_ms) - t0))
    [ "$RC" = 124 ] || [ "$RC" = 137 ] && fail "muster $cmd with a FIFO token file hung"
    [ "$RC" = 2 ] || { cat "$T/fifo.$cmd.err" >&2; fail "muster $cmd with a FIFO: exit $RC, not 2"; }
    [ "$ms" -lt 5000 ] || fail "muster $cmd with a FIFO took $ms ms"
    one_line "$T/fifo.$cmd.err" "muster $cmd, FIFO" "token file $T/fifo is a FIFO, not a regular file"
done

# 2. over-long tokens: refused with their length, never cut short; the token is not printed
LONG=$(head -c 300 /dev/zero | tr '\0' L)
for cmd in run server status preflight; do
    cmd_args $cmd
    ERRF=$T/long.$cmd.err IT_TIMEOUT=20 mrun MUSTER_TOKEN="$LONG" -- "${ARGS[@]}"
    [ "$RC" = 2 ] || { cat "$T/long.$cmd.err" >&2; fail "muster $cmd, 300-character MUSTER_TOKEN: exit $RC, not 2"; }
    one_line "$T/long.$cmd.err" "muster $cmd, long MUSTER_TOKEN" "MUSTER_TOKEN is 300 characters; at most 256"
    grep -qF "$LONG" "$T/long.$cmd.err" && fail "muster $cmd printed the token"
done
(umask 077 && printf '%s\n' "$LONG" > "$T/long.token")
for cmd in run server status; do
    cmd_args $cmd --token-file "$T/long.token"
    ERRF=$T/longf.$cmd.err IT_TIMEOUT=20 mrun -u MUSTER_TOKEN -- "${ARGS[@]}"
    [ "$RC" = 2 ] || { cat "$T/longf.$cmd.err" >&2; fail "muster $cmd, 300-character token file: exit $RC"; }
    one_line "$T/longf.$cmd.err" "muster $cmd, long token file" \
        "token in $T/long.token is 300 characters; at most 256"
done

# 3. Kubernetes' secret volume layout: a sticky world-writable root, symlinks into a timestamped
#    directory. A server, an agent and `muster status` all take it.
K=$T/k8s
TS=..2026_12_01_10_00_00.123456789
mkdir -p "$K/$TS" && chmod 1777 "$K" && chmod 755 "$K/$TS"
TOKEN=k8s-token-$$-$RANDOM$RANDOM
(umask 077 && printf '%s\n' "$TOKEN" > "$K/$TS/token")
ln -s "$TS" "$K/..data"
ln -s ..data/token "$K/token"
SERVER_NO_HTTP=1 start_server -u MUSTER_TOKEN -- --token-file "$K/token"
grep -q "wrote a new server secret" "$SERR" && fail "the server did not read the symlinked token"
JOB=k8s-$$
mkdir -p "$T/w"
agent k -u MUSTER_TOKEN -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT \
    --rdzv-id $JOB --token-file "$K/token" --rdzv-conf join_timeout=20 --no-python "$WORKER" hold "$T/w"
wait_for 30 files_at_least 1 "$T/w/ready.0.0" || { show_all; fail "the worker did not start"; }
OUTF=$T/st.out ERRF=$T/st.err IT_TIMEOUT=10 mrun -u MUSTER_TOKEN -- status \
    --rdzv-endpoint 127.0.0.1:$SPORT --token-file "$K/token"
[ "$RC" = 0 ] && grep -q "$JOB" "$T/st.out" || { cat "$T/st.out" "$T/st.err" >&2; fail "muster status with the symlinked token failed"; }

# 4. the agent keeps the token in a region marked MADV_DONTDUMP + MADV_WIPEONFORK ("dd", "wf"
#    in smaps), and gdb's gcore (as root, which may ptrace a non-dumpable process) leaves it out.
#    The core still holds the token elsewhere (copies of other modules): that is why the
#    process is not dumpable at all.
AP=${APID[k]}
REGIONS=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {m = $1} /^VmFlags:/ && / dd/ && / wf/ {print m}' "/proc/$AP/smaps")
[ -n "$REGIONS" ] || fail "the agent has no secret region (dd + wf) in /proc/$AP/smaps"
if [ "$(id -u)" = 0 ] && command -v gdb > /dev/null && command -v readelf > /dev/null; then
    if timeout 60 gdb -nx -batch -p "$AP" -ex "gcore $T/core.agent" > "$T/gdb.out" 2>&1 \
        && [ -s "$T/core.agent" ]; then
        readelf -lW "$T/core.agent" | awk '$1 == "LOAD" {print $3, $5}' > "$T/loads"
        for r in $REGIONS; do
            lo=$((16#${r%-*})) hi=$((16#${r#*-}))
            while read -r va fs; do
                [ $((fs)) -gt 0 ] && [ $((va)) -lt $hi ] && [ $((va + fs)) -gt $lo ] \
                    && fail "gcore dumped the secret region $r"
            done < "$T/loads"
        done
        rm -f "$T/core.agent"
    else
        note "gcore could not attach to the agent (ptrace not allowed here?): not checked"
    fi
else
    note "no root, gdb or readelf: the core of the agent is not checked"
fi
touch "$T/w/release"
agent_wait k 30
expect_agent_rc k 0
stop_server

# 5. not dumpable: run as an unprivileged user, the agent's /proc/PID/environ (MUSTER_TOKEN,
#    which keys every connection) becomes root's, so the same user cannot read it or ptrace the
#    agent; its workers (after execve) are the user's as usual. MUSTER_ALLOW_CORE_DUMPS=1 opts out.
if [ "$(id -u)" != 0 ] || ! command -v setpriv > /dev/null \
    || ! setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups "$MUSTER_BIN" --version > /dev/null 2>&1; then
    note "not root, no setpriv, or $MUSTER_BIN not executable by uid $NOBODY: dumpable not checked"
    assert_no_marked_left "after the test" 5
    exit 0
fi
chmod 755 "$T" # the unprivileged agent opens every directory of its TMPDIR ($U)
U=$T/u
mkdir -p "$U/w1" "$U/w2"
(umask 077 && printf 'user-token-%s\n' "$$" > "$U/token")
chown -R $NOBODY:$NOBODY "$U"
SERVER_NO_HTTP=1 SERVER_TAG=server2 start_server MUSTER_TOKEN="user-token-$$" --
# unpriv_agent NAME [VAR=VALUE...] -- RUN_ARGS...: `muster run` as uid 65534
unpriv_agent() {
    local name=$1 assigns=()
    shift
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        assigns+=("$1")
        shift
    done
    shift
    env --default-signal=INT,QUIT,TERM -u MUSTER_TOKEN ${assigns[@]+"${assigns[@]}"} \
        MUSTER_IT_MARK="$MARK" TMPDIR="$U" setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups \
        "$MUSTER_BIN" run "$@" > "$T/$name.out" 2> "$T/$name.err" &
    APID[$name]=$!
    IT_BG_PIDS="$IT_BG_PIDS $!"
}
unpriv_agent u1 -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id u1-$$ \
    --token-file "$U/token" --rdzv-conf join_timeout=20 --no-python "$WORKER" hold "$U/w1"
unpriv_agent u2 MUSTER_ALLOW_CORE_DUMPS=1 -- --nnodes 1 --nproc-per-node 1 \
    --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id u2-$$ --token-file "$U/token" \
    --rdzv-conf join_timeout=20 --no-python "$WORKER" hold "$U/w2"
wait_for 30 files_at_least 1 "$U/w1/ready.0.0" && wait_for 30 files_at_least 1 "$U/w2/ready.0.0" \
    || { show_all; fail "the unprivileged agents' workers did not start"; }
for n in 1 2; do
    ap=${APID[u$n]}
    expect_eq "uid of agent u$n" $NOBODY "$(awk '/^Uid:/ {print $2}' "/proc/$ap/status")"
    wp=$(awk '{print $3; exit}' "$U/w$n/starts")
    expect_eq "owner of the worker's environ (u$n)" $NOBODY "$(stat -c %u "/proc/$wp/environ")"
done
expect_eq "owner of a non-dumpable agent's environ" 0 "$(stat -c %u "/proc/${APID[u1]}/environ")"
setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups cat "/proc/${APID[u1]}/environ" \
    > /dev/null 2>&1 && fail "the same user read the agent's environment"
expect_eq "owner of the environ with MUSTER_ALLOW_CORE_DUMPS=1" $NOBODY \
    "$(stat -c %u "/proc/${APID[u2]}/environ")"
touch "$U/w1/release" "$U/w2/release"
agents_exit 30 0 u1 u2
stop_server
assert_no_marked_left "after the test" 5
