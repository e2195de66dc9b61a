# shellcheck shell=bash
# Helpers for the multi-agent tests (several `muster run` agents + `muster server` on one
# machine). Source after lib.sh:
#
#     . "$(dirname "$0")/lib.sh"
#     . "$(dirname "$0")/multi.sh"
#
# Every process is started through mrun_bg, so it carries the test's marker and the EXIT trap
# kills whatever is left. Output of agent NAME is in $T/NAME.out / $T/NAME.err.

declare -A APID=()  # agent name -> pid of its muster

# free_port: prints a TCP port that nobody listens on now (random in 20000-59999). Used only
# where a test needs an agent-hosted endpoint; a server is started on port 0 instead.
free_port() {
    local p i
    for i in $(seq 1 50); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        if ! ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null | grep -q .; then
            echo "$p"
            return 0
        fi
    done
    fail "no free port found"
}

# start_server [VAR=VALUE...] [-- EXTRA_ARGS...]: starts `muster server --listen
# ${SERVER_HOST:-127.0.0.1}:${SERVER_PORT:-0} --http ${SERVER_HOST}:0 --http-public-status` and waits (10 s) for its
# "server listening on" line. Sets SPID, SPORT (the real port), SHTTP (HOST:PORT of the HTTP
# listener, empty if none was printed), SERR (its stderr file). SERVER_TAG names the files
# (default "server"; use another tag for a second start).
start_server() {
    local assigns=() extra=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        assigns+=("$1")
        shift
    done
    [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
    local host=${SERVER_HOST:-127.0.0.1} port=${SERVER_PORT:-0} tag=${SERVER_TAG:-server}
    # /status over HTTP needs an observer credential (docs/SECURITY.md); the tests that read it
    # get it public (SERVER_HTTP_PRIVATE=1: not, for the tests of that check)
    local http=(--http "$host:0" --http-public-status)
    [ "${SERVER_HTTP_PRIVATE:-0}" = 1 ] && http=(--http "$host:0")
    [ "${SERVER_NO_HTTP:-0}" = 1 ] && http=()
    SERR=$T/$tag.err
    OUTF=$T/$tag.out ERRF=$SERR mrun_bg ${assigns[@]+"${assigns[@]}"} -- \
        server --listen "$host:$port" "${http[@]}" ${extra[@]+"${extra[@]}"}
    SPID=$MPID
    # the whole line: a line read while it is being written would give a cut port
    if ! wait_for 10 sh -c "grep -q 'server listening on .*:[0-9][0-9]*\$' '$SERR' && [ -z \"\$(tail -c1 '$SERR')\" ]"; then
        if ! kill -0 "$SPID" 2>/dev/null; then
            wait "$SPID" 2>/dev/null
            local rc=$?
            sed 's/^/  server: /' "$SERR" >&2
            fail "muster server exited ($rc) before listening (muster server not implemented yet?)"
        fi
        sed 's/^/  server: /' "$SERR" >&2
        fail "muster server printed no 'server listening on' line within 10 s"
    fi
    SPORT=$(sed -n 's/.*server listening on .*:\([0-9][0-9]*\).*/\1/p' "$SERR" | head -1)
    SHTTP=$(sed -n 's/.*http on \([^ ]*:[0-9][0-9]*\).*/\1/p' "$SERR" | head -1)
    [ -n "$SPORT" ] && [ "$SPORT" != 0 ] || fail "cannot read the server's port from: $(cat "$SERR")"
}

# start_job NAME: a server (start_server) for one job JOB=NAME-PID whose workers write into $T/w;
# sets t0 (now_ms) once the server listens, for timing the job.
start_job() {
    start_server
    JOB=$1-$$
    mkdir -p "$T/w"
    t0=$(now_ms)
}

# agent NAME [VAR=VALUE...] -- RUN_ARGS...: starts `muster run RUN_ARGS` in the background.
agent() {
    local name=$1
    shift
    split_assigns "$@"
    OUTF=$T/$name.out ERRF=$T/$name.err mrun_bg ${IT_ASSIGNS[@]+"${IT_ASSIGNS[@]}"} \
        -- run ${IT_ARGS[@]+"${IT_ARGS[@]}"}
    APID[$name]=$MPID
}

# agent_wait NAME TIMEOUT_S: waits for agent NAME to exit; sets RC (fails the test on timeout,
# showing the agent's stderr).
agent_wait() {
    local name=$1 timeout=$2 pid=${APID[$1]}
    if ! wait_for "$timeout" pid_gone "$pid"; then
        show_agent "$name"
        fail "agent $name still running after ${timeout}s"
    fi
    RC=0
    wait "$pid" || RC=$?
}

# survivors_stopped T0_NS TIMEOUT_S WHAT RANKS...: waits until each rank's round-0 worker
# (worker.sh hold) wrote its stop time into $T/w/stop.RANK.0, failing the test after TIMEOUT_S
# ("... not stopped within TIMEOUT_S s WHAT"); sets WORST_MS to the latest stop, in ms after
# T0_NS (a `date +%s%N`).
survivors_stopped() {
    local t0=$1 timeout=$2 what=$3 r d
    shift 3
    for r in "$@"; do
        wait_for "$timeout" test -s "$T/w/stop.$r.0" ||
            { show_all; fail "survivor rank $r not stopped within $timeout s $what"; }
    done
    WORST_MS=0
    for r in "$@"; do
        d=$(( ($(cat "$T/w/stop.$r.0") - t0) / 1000000 ))
        [ $d -gt $WORST_MS ] && WORST_MS=$d
    done
}

# show_agent NAME [LINES]: the tail of agent NAME's stdout and stderr
show_agent() {
    show_tails "agent $1 " "$T/$1.out" "$T/$1.err" "${2:-20}"
}

show_all() {
    local f
    for f in "$T"/*.err; do
        echo "--- $(basename "$f") ---" >&2
        tail -n 15 "$f" >&2
    done
}

# expect_agent_rc NAME EXPECTED
expect_agent_rc() {
    if [ "$RC" != "$2" ]; then
        show_all
        fail "agent $1: expected exit code $2, got $RC"
    fi
}

# agents_exit TIMEOUT_S EXPECTED NAME...: agent_wait and expect_agent_rc for each agent in turn.
agents_exit() {
    local timeout=$1 rc=$2 name
    shift 2
    for name in "$@"; do
        agent_wait "$name" "$timeout"
        expect_agent_rc "$name" "$rc"
    done
}

# release_agents NAME...: lets the held workers (worker.sh hold) finish; each agent must then
# exit 0 within 30 s.
release_agents() {
    : > "$T/w/release"
    agents_exit 30 0 "$@"
}

# expect_lost_node RESTART NAME...: each agent printed that it restarts its workers (RESTART,
# e.g. 1/2) because a node was lost.
expect_lost_node() {
    local restart=$1 name
    shift
    for name in "$@"; do
        grep -q "restarting workers (restart $restart):.*lost node" "$T/$name.err" ||
            { show_all; fail "agent $name did not print 'restarting workers (restart $restart): ... lost node'"; }
    done
}

# mentions TEXT PATTERN: does TEXT contain PATTERN (grep -q)?
mentions() {
    grep -q -- "$2" <<< "$1"
}

# http_get HOST:PORT PATH: GET PATH; the body goes to $T/http.body, HTTP_CODE is set (000 when
# no answer). Not for $(...): HTTP_CODE must be set in the test's own shell.
# The server builds /metrics and /status at most every 250 ms and serves that snapshot
# (docs/SECURITY.md "Limits and quotas of a shared server"): a request within 300 ms of the
# previous one first waits out the rest, so that what a test asserts right after an event is
# never the snapshot from before it.
HTTP_LAST_MS=0
http_get() {
    local hp=$1 path=$2 now
    now=$(date +%s%3N)
    [ $((now - HTTP_LAST_MS)) -ge 300 ] || sleep "0.$(printf %03d $((300 - (now - HTTP_LAST_MS))))"
    HTTP_CURL_RC=0
    HTTP_CODE=$(curl -s -m 5 -o "$T/http.body" -w '%{http_code}' "http://$hp$path") || HTTP_CURL_RC=$?
    [ "$HTTP_CURL_RC" = 0 ] || HTTP_CODE=000
    HTTP_LAST_MS=$(date +%s%3N)
    return 0
}

# check_ranks DIR ATTEMPT WORLD NODES: the env dumps DIR/env.<rank>.<ATTEMPT> of one round
# (worker.sh dump/hold) describe a consistent world: WORLD files, ranks 0..WORLD-1, NODES group
# ranks 0..NODES-1, each node's ranks contiguous from offset = prefix sum of the lower nodes'
# LOCAL_WORLD_SIZE, RANK = offset + LOCAL_RANK, the same WORLD_SIZE, GROUP_WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RESTART_COUNT (= ATTEMPT) everywhere.
check_ranks() {
    local dir=$1 att=$2 world=$3 nodes=$4 r f g lr lws
    local -A lws_of=() min_of=() cnt_of=()
    local maddr="" mport="" v
    for r in $(seq 0 $((world - 1))); do
        f=$dir/env.$r.$att
        [ -f "$f" ] || fail "round $att: no worker with RANK=$r (files: $(ls "$dir" | tr '\n' ' '))"
        expect_eq "RANK in $f" "$r" "$(envval "$f" RANK)"
        expect_eq "WORLD_SIZE of rank $r" "$world" "$(envval "$f" WORLD_SIZE)"
        expect_eq "GROUP_WORLD_SIZE of rank $r" "$nodes" "$(envval "$f" GROUP_WORLD_SIZE)"
        expect_eq "TORCHELASTIC_RESTART_COUNT of rank $r" "$att" "$(envval "$f" TORCHELASTIC_RESTART_COUNT)"
        v=$(envval "$f" MUSTER_RESTART_COUNT) && expect_eq "MUSTER_RESTART_COUNT of rank $r" "$att" "$v"
        g=$(envval "$f" GROUP_RANK)
        lr=$(envval "$f" LOCAL_RANK)
        lws=$(envval "$f" LOCAL_WORLD_SIZE)
        [ "$g" -ge 0 ] && [ "$g" -lt "$nodes" ] || fail "rank $r: GROUP_RANK=$g out of 0..$((nodes - 1))"
        if [ -n "${lws_of[$g]:-}" ]; then
            expect_eq "LOCAL_WORLD_SIZE on node $g" "${lws_of[$g]}" "$lws"
        fi
        lws_of[$g]=$lws
        cnt_of[$g]=$(( ${cnt_of[$g]:-0} + 1 ))
        # the rank minus the local rank is the node's offset: the same for every local rank
        if [ -n "${min_of[$g]:-}" ]; then
            expect_eq "RANK-LOCAL_RANK on node $g (rank $r)" "${min_of[$g]}" "$((r - lr))"
        fi
        min_of[$g]=$((r - lr))
        if [ -z "$maddr" ]; then
            maddr=$(envval "$f" MASTER_ADDR)
            mport=$(envval "$f" MASTER_PORT)
        fi
        expect_eq "MASTER_ADDR of rank $r" "$maddr" "$(envval "$f" MASTER_ADDR)"
        expect_eq "MASTER_PORT of rank $r" "$mport" "$(envval "$f" MASTER_PORT)"
    done
    [ -n "$maddr" ] && [ -n "$mport" ] || fail "round $att: MASTER_ADDR/MASTER_PORT empty"
    local off=0
    for g in $(seq 0 $((nodes - 1))); do
        [ -n "${lws_of[$g]:-}" ] || fail "round $att: no worker has GROUP_RANK=$g"
        expect_eq "workers on node $g" "${lws_of[$g]}" "${cnt_of[$g]}"
        expect_eq "rank offset of node $g (prefix sum of LOCAL_WORLD_SIZE)" "$off" "${min_of[$g]}"
        off=$((off + lws_of[$g]))
    done
    expect_eq "sum of LOCAL_WORLD_SIZE" "$world" "$off"
    [ -e "$dir/env.$world.$att" ] && fail "round $att: a worker has RANK=$world >= WORLD_SIZE"
    return 0
}

# stop_server: SIGTERM to the server started last; it must exit 0 within 10 s.
stop_server() {
    kill -0 "$SPID" 2>/dev/null || fail "the server (pid $SPID) is not running any more"
    kill -TERM "$SPID"
    wait_rc "$SPID" 10
    [ "$RC" = 0 ] || { sed 's/^/  server: /' "$SERR" >&2; fail "muster server exited $RC after SIGTERM (expected 0)"; }
}

# start_token_server [SERVER_ARGS...]: a shared server (start_server) with a token file,
# SF=$T/server.token, that job credentials are made from (job_token); sets EP=127.0.0.1:$SPORT.
start_token_server() {
    SF=$T/server.token
    start_server -u MUSTER_TOKEN -- --token-file "$SF" "$@"
    EP=127.0.0.1:$SPORT
}

# job_token OUT TOKEN_ARGS...: `muster token TOKEN_ARGS` from the server's token file into OUT;
# fails the test where it fails.
job_token() {
    local out=$1
    shift
    IT_TIMEOUT=10 mrun -u MUSTER_TOKEN -- token --token-file "$SF" "$@" --out "$out"
    [ "$RC" = 0 ] || fail "muster token $* failed: $(cat "$T/err" 2>/dev/null)"
}

# replica_agents SCRIPT DIR1 DIR2 [RUN_ARGS...]: agents a1 and a2 of a two-node job JOB on the
# server (start_server), each running the worker SCRIPT (--no-python) with --checkpoint-dir
# DIRk and --replicate-checkpoints 1, and RUN_ARGS; a1 starts first, so it is group rank 0.
replica_agents() {
    local script=$1 dirs=("$2" "$3") k
    shift 3
    for k in 1 2; do
        agent a$k -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id "$JOB" \
            --checkpoint-dir "${dirs[k - 1]}" --replicate-checkpoints 1 "$@" --no-python "$script"
        sleep 0.3
    done
}
