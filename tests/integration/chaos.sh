# shellcheck shell=bash
# The chaos run: a deterministic PyTorch DDP job (examples/pytorch/train_ckpt.py, gloo,
# CPU, fixed seeds and data order) on 3 network-namespace hosts, hit by a seeded random schedule
# of faults; it must finish with weights bit-identical to a fault-free run's. Shared by
# tests/integration/test_chaos.sh (about 10 faults) and bench/chaos.sh (100 faults).
#
#     . tests/integration/ft.sh; . multi.sh; . netns.sh; . chaos.sh
#     chaos_main           # reads the CHAOS_* variables below; exits through fail() on a failure
#
# Layout: namespace host 4 plays "h0" (the `muster server`), hosts 1..3 run one agent each
# (`muster run --nnodes 3 --nproc-per-node 1 ... --max-restarts 1000`). --nnodes is fixed, so
# the data sharding, and therefore the final weights, do not depend on the faults. The
# checkpoint directory is on the file system all namespaces share.
#
# Faults (kind names as counted in the summary):
#   worker_kill   kill -9 of the python worker of a random host
#   agent_kill    kill -9 of a random host's agent; 0.5-2 s later the same command again there
#   worker_hang   SIGSTOP of a random host's worker (muster must kill it after --hang-timeout)
#   ckpt_corrupt  bytes appended to the newest checkpoint already in DIR/.muster/registry.json
#   server_kill   kill -9 of the server; 1-3 s later a new one on the same address
#   link_cut      a host's link down (ns_cut) for 3-5 s, then restored
# Between faults the driver waits until the job has recovered: for a fault that must restart
# the job, a new "restarting workers" line, then (for every fault) a checkpoint written by
# rank 0 after that; then a random 0-CHAOS_GAP s more. A recovery that does not come within
# CHAOS_RECOVER_S fails the run.
#
# At the end: every agent (the last one of each host) exited 0; rank 0's final `params` hash
# equals the reference run's; no process carrying the test's marker is left; every checkpoint
# muster ever recorded still exists and is still in the registry (no --keep-checkpoints here);
# every one we did not corrupt still has its recorded size. Prints the faults by kind and the
# time lost per fault ((wall - reference wall) / faults), and a one-line summary
# "chaos: seed=... faults=... ...".
#
# Variables: CHAOS_SEED (default: random, printed), CHAOS_FAULTS (10), CHAOS_STEPS (150),
# CHAOS_CKPT_EVERY (5), CHAOS_STEP_SLEEP (0.15), CHAOS_GAP (2, seconds), CHAOS_RECOVER_S (90),
# CHAOS_WALL_S (cap on the chaos run's wall time, 600), CHAOS_REF_PARAMS (skip the reference run
# and use this hash; CHAOS_REF_WALL_MS then gives its wall time, for the per-fault figure;
# otherwise the reference comes from $MUSTER_CACHE when it holds one: ch_ref_key),
# CHAOS_KINDS (space-separated subset of the kinds above; default all).

CHAOS_SEED=${CHAOS_SEED:-$(( $(date +%s%N) % 32768 ))}
CHAOS_FAULTS=${CHAOS_FAULTS:-10}
CHAOS_STEPS=${CHAOS_STEPS:-150}
CHAOS_CKPT_EVERY=${CHAOS_CKPT_EVERY:-5}
CHAOS_STEP_SLEEP=${CHAOS_STEP_SLEEP:-0.15}
CHAOS_GAP=${CHAOS_GAP:-2}
CHAOS_RECOVER_S=${CHAOS_RECOVER_S:-90}
CHAOS_WALL_S=${CHAOS_WALL_S:-600}
CHAOS_KINDS=${CHAOS_KINDS:-worker_kill agent_kill worker_hang ckpt_corrupt server_kill link_cut}
CHAOS_PORT=29400
CHAOS_HANG_TIMEOUT=3

declare -A CH_GEN=()        # host -> generation of its agent (log files a<k>.<gen>.out/err)
declare -A CH_COUNT=()      # fault kind -> how many were injected
declare -A CH_CORRUPTED=()  # checkpoint name -> 1 when we appended bytes to it
CH_SERVER_GEN=0
CH_SPID=""
CH_PHASE=""                 # "ref" or "chaos": prefix of the log files

chlog() {
    echo "chaos: $*" >&2
}

# ms since CH_T0
ch_elapsed() {
    echo $(( ($(date +%s%N) - CH_T0) / 1000000 ))
}

ch_fmt_ms() {
    printf '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 ))
}

# ch_rand LO HI: sets R to a number in LO..HI from the seeded $RANDOM. Never call it in $(...):
# bash reseeds RANDOM in a subshell, and the schedule would no longer follow the seed.
ch_rand() {
    R=$(( $1 + RANDOM % ($2 - $1 + 1) ))
}

ch_start_server() {
    CH_SERVER_GEN=$((CH_SERVER_GEN + 1))
    local name=$CH_PHASE-server.$CH_SERVER_GEN try
    for try in 1 2 3 4 5; do
        ns_bg 4 "$name" -- "$MUSTER_BIN" server --listen "${HOST_ADDR[4]}:$CHAOS_PORT"
        CH_SPID=$MPID
        if wait_for 10 grep -q 'server listening on' "$T/$name.err"; then
            return 0
        fi
        if kill -0 "$CH_SPID" 2>/dev/null; then
            break
        fi
        wait "$CH_SPID" 2>/dev/null
        chlog "server start $try on ${HOST_ADDR[4]}:$CHAOS_PORT failed: $(tail -2 "$T/$name.err")"
        sleep 0.5
    done
    sed 's/^/  server: /' "$T/$name.err" >&2
    fail "muster server in host 4 did not listen on ${HOST_ADDR[4]}:$CHAOS_PORT"
}

ch_start_agent() {
    local k=$1
    CH_GEN[$k]=$(( ${CH_GEN[$k]:-0} + 1 ))
    ns_bg "$k" "$CH_PHASE-a$k.${CH_GEN[$k]}" ${FT_CLEAN_ENV[@]+"${FT_CLEAN_ENV[@]}"} \
        PYTHON_EXEC="$TORCH_PY" GLOO_SOCKET_IFNAME="$NS_IF" -- \
        "$MUSTER_BIN" run --nnodes 3 --nproc-per-node 1 \
        --rdzv-endpoint "${HOST_ADDR[4]}:$CHAOS_PORT" --rdzv-id chaos --local-addr "${HOST_ADDR[$k]}" \
        --max-restarts 1000 --checkpoint-dir "$CH_CKPT" --hang-timeout $CHAOS_HANG_TIMEOUT \
        --rdzv-conf join_timeout=120,heartbeat_timeout=2,keep_alive_interval=0.5,reconnect_grace=60 \
        --shutdown-timeout 5 \
        "$CKPT_PY" --steps "$CHAOS_STEPS" --ckpt-every "$CHAOS_CKPT_EVERY" --step-sleep "$CHAOS_STEP_SLEEP"
    CH_APID[$k]=$MPID
}

# all agent outputs of this phase, concatenated
ch_all_out() {
    cat "$T/$CH_PHASE"-a*.out 2>/dev/null
}
ch_all_err() {
    cat "$T/$CH_PHASE"-a*.err 2>/dev/null
}
ch_ckpt_lines() {
    ch_all_out | grep -c '^\[rank0\]: checkpoint '
}
ch_restart_lines() {
    ch_all_err | grep -c 'restarting workers (restart '
}
ch_done() {
    ch_all_out | grep -q '^\[rank0\]: done: '
}
ch_agents_alive() {
    local k
    for k in 1 2 3; do
        kill -0 "${CH_APID[$k]}" 2>/dev/null && [ "$(awk '/^State:/ {print $2}' /proc/"${CH_APID[$k]}"/status 2>/dev/null)" != Z ] && return 0
    done
    return 1
}

ch_show_logs() {
    local f
    for f in "$T/$CH_PHASE"-*.err; do
        echo "--- $(basename "$f") (last 25 lines) ---" >&2
        tail -n 25 "$f" >&2
    done
    echo "--- rank 0 output (last 10 lines) ---" >&2
    ch_all_out | grep '^\[rank0\]' | tail -n 10 >&2
}

ch_fail() {
    ch_show_logs
    fail "seed $CHAOS_SEED: $*"
}

# the live python worker pid(s) of host K (python running train_ckpt.py; the agent's own
# command line names the script too)
ch_workers_of() {
    local k=$1 pid
    for pid in $(ip netns pids "${NS_HOST[$k]}" 2>/dev/null); do
        case "$(cat "/proc/$pid/comm" 2>/dev/null)" in python*) ;; *) continue ;; esac
        grep -qaF train_ckpt.py "/proc/$pid/cmdline" 2>/dev/null || continue
        [ "$(awk '/^State:/ {print $2}' /proc/"$pid"/status 2>/dev/null)" = S ] \
            || [ "$(awk '/^State:/ {print $2}' /proc/"$pid"/status 2>/dev/null)" = R ] || continue
        echo "$pid"
    done
}

# waits until K > N
ch_count_gt() {
    [ "$("$1")" -gt "$2" ]
}

# ch_recover KIND RESTARTS_BEFORE CKPTS_BEFORE: waits for the job to run again after a fault:
# for a fault that must restart the job, a new "restarting workers" line first; then a new
# checkpoint line of rank 0 (or the job's end).
ch_recover() {
    local kind=$1 r0=$2 c=$3
    case "$kind" in
    worker_kill | agent_kill | worker_hang | link_cut)
        if ! wait_for "$CHAOS_RECOVER_S" ch_count_gt ch_restart_lines "$r0"; then
            ch_done && return 0
            ch_fail "$kind: no agent printed 'restarting workers' within ${CHAOS_RECOVER_S} s"
        fi
        c=$(ch_ckpt_lines)
        ;;
    esac
    _ch_progress() { ch_done || ch_count_gt ch_ckpt_lines "$c"; }
    wait_for "$CHAOS_RECOVER_S" _ch_progress \
        || ch_fail "$kind: rank 0 wrote no checkpoint within ${CHAOS_RECOVER_S} s of the recovery"
}

# ch_inject KIND: injects one fault; sets CH_WHAT (a description). Returns 1 when it could not
# be injected now (no worker found, nothing recorded yet).
ch_inject() {
    local kind=$1 k pid pids name d
    CH_WHAT=""
    case "$kind" in
    worker_kill | worker_hang)
        ch_rand 1 3; k=$R
        pids=$(ch_workers_of "$k")
        [ -n "$pids" ] || return 1
        pid=${pids%%$'\n'*}
        if [ "$kind" = worker_kill ]; then
            kill -9 "$pid" 2>/dev/null || return 1
            CH_WHAT="kill -9 worker pid $pid on host $k"
        else
            kill -STOP "$pid" 2>/dev/null || return 1
            CH_WHAT="SIGSTOP worker pid $pid on host $k"
        fi
        ;;
    agent_kill)
        ch_rand 1 3; k=$R
        pid=${CH_APID[$k]}
        kill -9 "$pid" 2>/dev/null || return 1
        wait "$pid" 2>/dev/null
        ch_rand 500 2000; d=$R
        sleep "$(ch_fmt_ms "$d")"
        ch_start_agent "$k"
        CH_WHAT="kill -9 agent pid $pid on host $k, restarted after $(ch_fmt_ms "$d") s as pid ${CH_APID[$k]}"
        ;;
    ckpt_corrupt)
        name=$(reg_names "$CH_CKPT" | sed -n 1p)
        [ -n "$name" ] && [ -f "$CH_CKPT/$name" ] || return 1
        corrupt_append "$CH_CKPT/$name"
        CH_CORRUPTED[$name]=1
        CH_WHAT="appended bytes to $name (newest in the registry)"
        ;;
    server_kill)
        pid=$CH_SPID
        kill -9 "$pid" 2>/dev/null || return 1
        wait "$pid" 2>/dev/null
        ch_rand 1000 3000; d=$R
        sleep "$(ch_fmt_ms "$d")"
        ch_start_server
        CH_WHAT="kill -9 server pid $pid, restarted after $(ch_fmt_ms "$d") s as pid $CH_SPID"
        ;;
    link_cut)
        ch_rand 1 3; k=$R
        ch_rand 3000 5000; d=$R
        ns_cut "$k"
        sleep "$(ch_fmt_ms "$d")"
        ns_restore "$k"
        CH_WHAT="link of host $k cut for $(ch_fmt_ms "$d") s"
        ;;
    *) fail "unknown fault kind $kind" ;;
    esac
    return 0
}

# ch_run PHASE NFAULTS: one run of the job (3 agents + server) with NFAULTS faults; sets
# CH_WALL_MS, CH_PARAMS, CH_INJECTED.
ch_run() {
    CH_PHASE=$1
    local nfaults=$2 k i kind r0 c0 t_f t_r gap tries
    local kinds
    read -r -a kinds <<< "$CHAOS_KINDS"
    CH_CKPT=$T/shared-$CH_PHASE/ckpt
    mkdir -p "$CH_CKPT"
    CH_GEN=()
    CH_SERVER_GEN=0
    CH_INJECTED=0
    CH_T0=$(date +%s%N)
    ch_start_server
    for k in 1 2 3; do
        ch_start_agent "$k"
    done
    local deadline=$(( $(date +%s) + CHAOS_WALL_S ))
    if [ "$nfaults" -gt 0 ]; then
        # the job is running once rank 0 wrote its first checkpoint
        _ch_first() { ch_done || ch_count_gt ch_ckpt_lines 0; }
        wait_for "$CHAOS_RECOVER_S" _ch_first || ch_fail "the job wrote no first checkpoint"
    fi
    i=0
    while [ "$i" -lt "$nfaults" ] && ! ch_done; do
        [ "$(date +%s)" -lt "$deadline" ] || { chlog "wall-time cap ${CHAOS_WALL_S} s reached after $i faults"; break; }
        ch_rand 0 $((CHAOS_GAP * 1000)); gap=$R
        sleep "$(ch_fmt_ms "$gap")"
        ch_done && break
        kind=${kinds[$((RANDOM % ${#kinds[@]}))]}
        r0=$(ch_restart_lines)
        c0=$(ch_ckpt_lines)
        t_f=$(ch_elapsed)
        tries=0
        until ch_inject "$kind"; do
            tries=$((tries + 1))
            ch_done && break 2
            [ "$tries" -lt 50 ] || ch_fail "could not inject $kind for 10 s"
            sleep 0.2
        done
        i=$((i + 1))
        CH_INJECTED=$i
        CH_COUNT[$kind]=$(( ${CH_COUNT[$kind]:-0} + 1 ))
        ch_recover "$kind" "$r0" "$c0"
        t_r=$(ch_elapsed)
        chlog "fault $i/$nfaults at +$(ch_fmt_ms "$t_f") s: $kind: $CH_WHAT; running again after $(ch_fmt_ms $((t_r - t_f))) s"
    done
    ch_finish "$deadline"
}

# ch_finish DEADLINE: the end of a run: every agent of the last generation exits 0 (waiting up to
# the wall-time cap DEADLINE, in date +%s, at least 30 s), the job's final parameters are read,
# the server ends cleanly; sets CH_WALL_MS and CH_PARAMS.
ch_finish() {
    local deadline=$1 k
    for k in 1 2 3; do
        local pid=${CH_APID[$k]} left=$(( deadline - $(date +%s) ))
        [ "$left" -gt 30 ] || left=30
        wait_for "$left" pid_gone "$pid" || ch_fail "agent on host $k (pid $pid) still running at the wall-time cap"
        RC=0
        wait "$pid" || RC=$?
        [ "$RC" = 0 ] || ch_fail "agent on host $k (pid $pid, $CH_PHASE-a$k.${CH_GEN[$k]}) exited $RC, expected 0"
    done
    CH_WALL_MS=$(ch_elapsed)
    CH_PARAMS=$(ch_all_out | sed -n 's/^\[rank0\]: done: .* params \([0-9a-f][0-9a-f]*\)$/\1/p' | tail -1)
    [ -n "$CH_PARAMS" ] || ch_fail "no '[rank0]: done: ... params' line"
    # the server ends cleanly too
    kill -TERM "$CH_SPID"
    wait_rc "$CH_SPID" 10
    [ "$RC" = 0 ] || ch_fail "muster server exited $RC after SIGTERM (expected 0)"
    assert_no_marked_left "after the $CH_PHASE run (seed $CHAOS_SEED)" 10
}

# ch_check_ckpts: no recorded checkpoint lost.
ch_check_ckpts() {
    local names n reg lost="" unreg="" resized="" sz rsz
    names=$(ch_all_err | sed -n 's/^muster: checkpoint \([^ ]*\) recorded.*/\1/p' | sort -u)
    reg=$(reg_names "$CH_CKPT")
    for n in $names; do
        [ -e "$CH_CKPT/$n" ] || lost="$lost $n"
        grep -qxF "$n" <<< "$reg" || unreg="$unreg $n"
    done
    for n in $reg; do
        [ -n "${CH_CORRUPTED[$n]:-}" ] && continue
        [ -e "$CH_CKPT/$n" ] || { lost="$lost $n"; continue; }
        sz=$(stat -c %s "$CH_CKPT/$n")
        rsz=$(reg_field "$CH_CKPT" "$n" size)
        [ "$sz" = "$rsz" ] || resized="$resized $n($sz!=$rsz)"
    done
    CH_NRECORDED=$(wc -w <<< "$names")
    [ -z "$lost" ] || ch_fail "recorded checkpoints missing from $CH_CKPT:$lost (directory: $(ckpts_in "$CH_CKPT" | tr '\n' ' '))"
    [ -z "$unreg" ] || ch_fail "checkpoints recorded during the run but absent from the final registry:$unreg"
    [ -z "$resized" ] || ch_fail "checkpoints we never touched have another size than recorded:$resized"
}

# The fault-free reference is deterministic: the same trainer, arguments and torch give the same
# parameters, whatever muster does (the chaos run checks all the rest). So it is kept in
# $MUSTER_CACHE (ctest sets it: build/tests/cache) under a hash of what it depends on (these
# scripts, the trainer, the run's arguments, torch's version file) and recomputed when any of
# them changes; without MUSTER_CACHE every run computes it.
ch_ref_key() {
    local here torch
    here=$(dirname "${BASH_SOURCE[0]}")
    torch=$("$TORCH_PY" -c 'import importlib.util as u; print(u.find_spec("torch").origin)' 2>/dev/null)
    {
        cat "$here/chaos.sh" "$here/ft.sh" "$here/multi.sh" "$here/netns.sh" "$here/lib.sh" \
            "$CKPT_PY" "$(dirname "$torch")/version.py" 2>/dev/null
        echo "$TORCH_PY $CHAOS_STEPS $CHAOS_CKPT_EVERY $CHAOS_STEP_SLEEP"
    } | sha256sum | cut -c1-16
}

# ch_ref_cached: 0 and CH_PARAMS, CH_WALL_MS from the cache when it holds this reference.
ch_ref_cached() {
    [ -n "${MUSTER_CACHE:-}" ] || return 1
    CH_REF_CACHE=$MUSTER_CACHE/chaos-ref.$(ch_ref_key)
    [ -f "$CH_REF_CACHE" ] && read -r CH_PARAMS CH_WALL_MS < "$CH_REF_CACHE" &&
        [ -n "$CH_PARAMS" ] && [ -n "$CH_WALL_MS" ]
}

# ch_ref_store: the reference just computed into the cache (atomically: a concurrent run of the
# same key reads a whole line or none).
ch_ref_store() {
    [ -n "${MUSTER_CACHE:-}" ] || return 0
    CH_REF_CACHE=$MUSTER_CACHE/chaos-ref.$(ch_ref_key)
    mkdir -p "$MUSTER_CACHE" && echo "$CH_PARAMS $CH_WALL_MS" > "$CH_REF_CACHE.$$" &&
        mv -f "$CH_REF_CACHE.$$" "$CH_REF_CACHE"
}

chaos_main() {
    need_torch
    ns_setup 4
    chlog "seed $CHAOS_SEED (rerun: CHAOS_SEED=$CHAOS_SEED), $CHAOS_FAULTS faults, --steps $CHAOS_STEPS --ckpt-every $CHAOS_CKPT_EVERY --step-sleep $CHAOS_STEP_SLEEP"
    local ref ref_ms
    if [ -n "${CHAOS_REF_PARAMS:-}" ]; then
        ref=$CHAOS_REF_PARAMS
        ref_ms=${CHAOS_REF_WALL_MS:-0}
        chlog "reference params $ref given (wall $(ch_fmt_ms "$ref_ms") s)"
    elif ch_ref_cached; then
        ref=$CH_PARAMS
        ref_ms=$CH_WALL_MS
        chlog "reference params $ref from the cache ($CH_REF_CACHE; wall $(ch_fmt_ms "$ref_ms") s)"
    else
        ch_run ref 0
        ref=$CH_PARAMS
        ref_ms=$CH_WALL_MS
        chlog "reference run: params $ref, wall $(ch_fmt_ms "$ref_ms") s"
        ch_ref_store
    fi
    RANDOM=$CHAOS_SEED
    ch_run chaos "$CHAOS_FAULTS"
    local kinds="" k lost_ms=0
    for k in $CHAOS_KINDS; do
        kinds="$kinds $k=${CH_COUNT[$k]:-0}"
    done
    [ "$CH_INJECTED" -gt 0 ] && lost_ms=$(( (CH_WALL_MS - ref_ms) / CH_INJECTED ))
    local same=no
    [ "$CH_PARAMS" = "$ref" ] && same=yes
    chlog "faults by kind:$kinds"
    echo "chaos: seed=$CHAOS_SEED faults=$CH_INJECTED/$CHAOS_FAULTS$kinds wall_s=$(ch_fmt_ms "$CH_WALL_MS") ref_wall_s=$(ch_fmt_ms "$ref_ms") lost_per_fault_s=$(ch_fmt_ms "$lost_ms") params=$CH_PARAMS ref_params=$ref identical=$same restarts=$(ch_all_err | grep -o 'restarting workers (restart [0-9]*' | sed 's/.* //' | sort -n | tail -1)"
    ch_goodput
    [ "$same" = yes ] || ch_fail "final params $CH_PARAMS differ from the reference's $ref"
    ch_check_ckpts
    chlog "all $CH_NRECORDED recorded checkpoints present and registered"
}

# One line per host of the last generation's goodput table (docs/FAULT_TOLERANCE.md "Goodput";
# an agent killed by a fault starts its count afresh, so it covers that agent's life only).
ch_goodput() {
    local k f line
    for k in 1 2 3; do
        f=$T/$CH_PHASE-a$k.${CH_GEN[$k]}.err
        [ -f "$f" ] || continue
        line=$(awk '/^muster: goodput: where/ { on = 1; out = "" }
            on && /^muster:   [a-z_ ]+ +[0-9.]+ s/ {
                n = $0; sub(/^muster:   /, "", n); v = n; sub(/ +[0-9.]+ s.*/, "", n)
                sub(/^[a-z_ ]+ +/, "", v); sub(/ s.*/, "", v); gsub(/ /, "_", n)
                out = out " " n "_s=" v }
            on && /goodput ratio/ { print "ratio=" $4 out; on = 0 }' "$f" | tail -1)
        echo "chaos: goodput host $k (agent generation ${CH_GEN[$k]}): ${line:-no table}"
    done
}

declare -A CH_APID=()
