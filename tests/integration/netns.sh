# shellcheck shell=bash
# Several "hosts" on one machine as Linux network namespaces, for the multi-host tests and the
# host-cut benchmark. Source after lib.sh (or define fail/skip/note first):
#
#     . "$(dirname "$0")/lib.sh"
#     . "$(dirname "$0")/netns.sh"
#     ns_setup 3                     # hosts 1..3, or skip (77) with a reason
#     ns_bg 1 NAME [VAR=VAL...] -- CMD ARGS...   # CMD in host 1, in the background
#     ns_cut 2; ns_restore 2         # take host 2's link down / up again
#
# Layout (all names carry this run's tag, so parallel tests never collide, and nothing is
# added to the root namespace but namespace names):
#
#   netns NS_BR ("mit<pid>-br"): bridge br0, and the root end "h<k>" of each host's veth pair
#   netns NS_HOST[k] ("mit<pid>-h<k>"): lo up, eth0 = 10.77.<NS_NET>.<k>/24
#
# NS_NET is derived from the pid (1..254); the segment is isolated in its own bridge namespace,
# so even two runs with the same NS_NET cannot see each other. HOST_ADDR[k] is host k's address;
# NS_IF is the interface name inside every host (eth0, for GLOO_SOCKET_IFNAME).
#
# Cleanup (EXIT, through lib.sh's IT_CLEANUP_HOOKS, or call ns_teardown yourself): kill every
# process still inside our namespaces, delete the namespaces (the veths and the bridge go with
# them). At setup, namespaces left by a run whose pid is gone (SIGKILLed test) are removed too.

if ! declare -F fail >/dev/null; then
    fail() { echo "FAIL: $*" >&2; exit 1; }
    skip() { echo "SKIP: $*" >&2; exit 77; }
    note() { echo "netns: $*" >&2; }
fi

NS_TAG="mit$$"
NS_BR="$NS_TAG-br"
NS_IF=eth0
NS_NET=$(( $$ % 254 + 1 ))
NS_CREATED=""
declare -A NS_HOST=() HOST_ADDR=() NS_BGPID=()

# ns_available: 0 if we can build namespaces here, else prints the reason and returns 1.
ns_available() {
    if [ "$(id -u)" != 0 ]; then
        echo "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
        return 1
    fi
    if ! command -v ip >/dev/null 2>&1; then
        echo "iproute2 'ip' command not found"
        return 1
    fi
    local probe="$NS_TAG-probe"
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "'ip netns add' does not work here"
        return 1
    fi
    if ! ip -n "$probe" link add br0 type bridge 2>/dev/null; then
        ip netns del "$probe" 2>/dev/null
        echo "cannot create a bridge (no bridge module?)"
        return 1
    fi
    if ! ip -n "$probe" link add v0 type veth peer name v1 2>/dev/null; then
        ip netns del "$probe" 2>/dev/null
        echo "cannot create a veth pair (no veth module?)"
        return 1
    fi
    ip netns del "$probe" 2>/dev/null
    return 0
}

# Removes namespaces of earlier runs whose owning process is gone.
ns_reap_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^mit[0-9]+-'); do
        pid=${ns#mit}
        pid=${pid%%-*}
        if ! kill -0 "$pid" 2>/dev/null; then
            ns_kill_inside "$ns"
            ip netns del "$ns" 2>/dev/null
        fi
    done
}

ns_kill_inside() {
    local pids
    pids=$(ip netns pids "$1" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    return 0
}

ns_teardown() {
    local ns pid
    for pid in "${NS_BGPID[@]}"; do
        kill -9 "$pid" 2>/dev/null
    done
    for ns in $NS_CREATED; do
        ns_kill_inside "$ns"
    done
    for ns in $NS_CREATED; do
        ip netns del "$ns" 2>/dev/null
    done
    NS_CREATED=""
    return 0
}

# ns_setup N: creates hosts 1..N on one bridge; skips the test (77) when impossible.
ns_setup() {
    local n=$1 k ns reason
    reason=$(ns_available) || skip "$reason"
    ns_reap_stale
    if [ -n "${IT_CLEANUP_HOOKS+x}" ]; then
        IT_CLEANUP_HOOKS="ns_teardown $IT_CLEANUP_HOOKS"
    else
        trap 'ns_teardown' EXIT
    fi
    ip netns add "$NS_BR" || fail "ip netns add $NS_BR"
    NS_CREATED="$NS_BR"
    ip -n "$NS_BR" link set lo up
    ip -n "$NS_BR" link add br0 type bridge || fail "bridge in $NS_BR"
    # no STP/forwarding delay: ports forward at once
    ip -n "$NS_BR" link set br0 type bridge forward_delay 0 stp_state 0 2>/dev/null
    ip -n "$NS_BR" link set br0 up
    for k in $(seq 1 "$n"); do
        ns="$NS_TAG-h$k"
        ip netns add "$ns" || fail "ip netns add $ns"
        NS_CREATED="$NS_CREATED $ns"
        NS_HOST[$k]=$ns
        HOST_ADDR[$k]="10.77.$NS_NET.$k"
        ip -n "$ns" link set lo up
        ip -n "$NS_BR" link add "h$k" type veth peer name "$NS_IF" netns "$ns" \
            || fail "veth for host $k"
        ip -n "$NS_BR" link set "h$k" master br0
        ip -n "$NS_BR" link set "h$k" up
        ip -n "$ns" addr add "${HOST_ADDR[$k]}/24" dev "$NS_IF"
        ip -n "$ns" link set "$NS_IF" up
    done
    # wait until every bridge port forwards (no ping on this image: the port state tells us)
    for k in $(seq 1 "$n"); do
        _ns_fwd() { ip -n "$NS_BR" -d link show "h$1" 2>/dev/null | grep -q 'state forwarding'; }
        wait_for 10 _ns_fwd "$k" || fail "bridge port of host $k does not forward"
    done
}

# ns_exec K CMD...: runs CMD inside host K in the foreground.
ns_exec() {
    local k=$1
    shift
    ip netns exec "${NS_HOST[$k]}" "$@"
}

# ns_bg K NAME [VAR=VALUE...] -- CMD ARGS...: runs CMD inside host K in the background, with
# the test's marker (MUSTER_IT_MARK) and default SIGINT/SIGQUIT/SIGTERM dispositions; stdout and
# stderr go to $T/NAME.out and $T/NAME.err. Sets MPID (the pid of CMD itself: `ip netns exec`
# execs it) and NS_BGPID[NAME], and APID[NAME] when multi.sh is loaded (agent_wait works).
ns_bg() {
    local k=$1 name=$2
    shift 2
    local assigns=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        assigns+=("$1")
        shift
    done
    [ "${1:-}" = "--" ] && shift
    ip netns exec "${NS_HOST[$k]}" env --default-signal=INT,QUIT,TERM \
        ${assigns[@]+"${assigns[@]}"} MUSTER_IT_MARK="${MARK:-}" "$@" \
        > "${T:-/tmp}/$name.out" 2> "${T:-/tmp}/$name.err" &
    MPID=$!
    NS_BGPID[$name]=$MPID
    IT_BG_PIDS="${IT_BG_PIDS:-} $MPID"
    if declare -p APID >/dev/null 2>&1; then
        APID[$name]=$MPID
    fi
}

# ns_server K PORT: `muster server` listening on host K's address (in the background, named
# "server" as ns_bg names it); sets SPID and SERR. Fails the test when it does not listen
# within 10 s. Needs lib.sh (wait_for, fail) and MUSTER_BIN.
ns_server() {
    ns_bg "$1" server -- "$MUSTER_BIN" server --listen "${HOST_ADDR[$1]}:$2"
    SPID=$MPID
    SERR=$T/server.err
    wait_for 10 grep -q 'server listening on' "$SERR" ||
        { cat "$SERR" >&2; fail "muster server in host $1 did not start listening"; }
}

# ns_job NAME HOSTS [SERVER_HOST]: sets up HOSTS hosts (ns_setup) for one job: JOB=NAME-PID,
# P (the server port) and the workers' directory $T/w; with SERVER_HOST, starts the server there
# (ns_server).
ns_job() {
    ns_setup "$2"
    JOB=$1-$$
    P=29400
    mkdir -p "$T/w"
    [ $# -lt 3 ] || ns_server "$3" $P
}

# ns_cut_survivors K RANKS...: cuts host K off (ns_cut) and waits up to 15 s until the round-0
# workers of those RANKS that are not on host K (by their HOSTNO) stopped; sets WORST_MS as
# survivors_stopped (multi.sh) does.
ns_cut_survivors() {
    local k=$1 r surv="" t_cut
    shift
    for r in "$@"; do
        [ "$(envval "$T/w/env.$r.0" HOSTNO)" != "$k" ] && surv="$surv $r"
    done
    t_cut=$(date +%s%N)
    ns_cut "$k"
    # shellcheck disable=SC2086
    survivors_stopped "$t_cut" 15 "of the cut" $surv
}

# ns_cut K / ns_restore K: take host K off the network and back. The bridge-side end of its
# veth goes down, so the host's eth0 loses carrier: no FIN, no RST, packets are just lost,
# which is what a pulled cable or a dead switch port looks like to the others.
ns_cut() {
    ip -n "$NS_BR" link set "h$1" down
}
ns_restore() {
    ip -n "$NS_BR" link set "h$1" up
}

# ns_replica_agents SCRIPT [RUN_ARGS...]: agents a1 and a2 of a two-node job JOB in hosts 1
# and 2 (ns_bg), the server on host 3 (ns_job ... 3), each running the worker SCRIPT
# (--no-python) with its own --checkpoint-dir $T/cK, --replicate-checkpoints 1 and
# --replicate-bandwidth 0, and RUN_ARGS; a1 starts first, so it is group rank 0.
ns_replica_agents() {
    local script=$1 k
    shift
    for k in 1 2; do
        ns_bg $k a$k -- "$MUSTER_BIN" run --nnodes 2 --nproc-per-node 1 \
            --rdzv-endpoint "${HOST_ADDR[3]}:$P" --rdzv-id "$JOB" --local-addr "${HOST_ADDR[$k]}" \
            --checkpoint-dir "$T/c$k" --replicate-checkpoints 1 --replicate-bandwidth 0 \
            "$@" --rdzv-conf join_timeout=30 --no-python "$script"
        sleep 0.3
    done
}

# ns_cut_job NAME HB_S JOIN_S KEEPALIVE_S: a job on 4 hosts with the server in host 4
# (ns_job NAME 4 4), for a test that cuts hosts off: sets HB=HB_S and CONF, the --rdzv-conf of
# its agents (heartbeat_timeout HB_S, join_timeout JOIN_S, keep_alive_interval KEEPALIVE_S, a
# 0.5 s last call).
ns_cut_job() {
    ns_job "$1" 4 4
    HB=$2
    CONF=join_timeout=$3,last_call_timeout=0.5,heartbeat_timeout=$HB,keep_alive_interval=$4
}

# ns_hold_agent K NAME NNODES [RUN_ARGS...]: agent NAME in host K (ns_bg, HOSTNO=K) of the job
# of ns_cut_job: `muster run --nnodes NNODES` with CONF and --max-restarts 2, its workers
# worker.sh hold into $T/w.
ns_hold_agent() {
    local k=$1 name=$2 nnodes=$3
    shift 3
    ns_bg $k $name HOSTNO=$k -- "$MUSTER_BIN" run --nnodes $nnodes --nproc-per-node 1 "$@" \
        --rdzv-endpoint ${HOST_ADDR[4]}:$P --rdzv-id $JOB --rdzv-conf $CONF \
        --max-restarts 2 --no-python "$WORKER" hold "$T/w"
}
