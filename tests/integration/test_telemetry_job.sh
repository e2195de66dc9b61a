#!/bin/bash
# The warnings only the server can give, from every node's telemetry (rendezvous/handler_tel.c):
# a real `muster server` (grace cut to 1.5 s by MUSTER_TELEMETRY_GRACE_MS) and a 2-node job of
# one worker per node on loopback, each agent with its own fake NVML scenario
# (tests/peers/fake_nvml.c: one GPU per node, the node's rank on it).
# apart: rank 0 holds 30 GiB at 97 % busy, rank 1 2 GiB at 20 %: /status, the server's log and
#   both agents' consoles (NOTICE) say "GPU memory far apart across the ranks" and "GPU 0 of ...
#   (node N) is a straggler: 20 % busy", each once.
# clock: both 95-97 % busy with the same memory, node 1's SM clock 900 MHz against 1980: "... is a
#   straggler: SM clock 900 MHz", and no memory warning.
# drift: node 1's straggling figures change from sample to sample (20, 21, 22 ... % busy): the
#   straggler and memory warnings are still said once each.
# exclude: 3 nodes, --nnodes 2:3 with --exclude-stragglers 2: node 1 straggles, is named twice
#   (one grace each), excluded (the server's log, /status's exclusions with the reason, its
#   agent refused with the exclusion line, exit 3) and nodes 0 and 2 go on in round 1 and finish.
# liar: node 0 claims 16 GPUs at 100 %, nodes 1 and 2 run at 40 %: warned of, but each node
#   counted once they do not lag the others, so --exclude-stragglers 1 excludes nobody.
# healthy: 97 % and 94 %, 30 and 29 GiB, 1980 and 1965 MHz: no warning at all, past the grace.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_cmd curl "for /status"
[ -n "${FAKE_NVML:-}" ] && [ -f "$FAKE_NVML" ] || skip "FAKE_NVML (the fake libnvidia-ml.so) is not built"
need_cmd jq "to read /status"

start_server MUSTER_TELEMETRY_GRACE_MS=1500
[ -n "$SHTTP" ] || fail "no HTTP port: $(cat "$SERR")"
mkdir -p "$T/w"
cat > "$T/w.sh" <<'SH'
#!/bin/bash
echo $$ > "$WDIR/pid.$JOB.n$NODE"
for _ in $(seq 300); do [ -e "$WDIR/stop.$JOB" ] && exit 0; sleep 0.1; done
exit 0
SH
chmod +x "$T/w.sh"
GiB=1073741824

# scn JOB I UTIL MEM_GIB SM_MHZ: agent I's scenario of job JOB (its one GPU, its worker on it)
scn() {
    cat > "$T/$1.$2.scn" <<SCN
# util used total sm mem temp power_mw throttle
gpu $3 $(($4 * GiB + GiB)) $((80 * GiB)) $5 2619 61 412000 0
proc 0 $T/w/pid.$1.n$2 $(($4 * GiB))
SCN
}

# run_job JOB [OPTION...]: the two agents of job JOB (--nnodes 2 unless an OPTION says)
run_job() {
    local job=$1 i
    shift
    for i in 0 1; do
        agent "$job$i" MUSTER_NVML_LIBRARY="$FAKE_NVML" FAKE_NVML_SCENARIO="$T/$job.$i.scn" \
            WDIR="$T/w" JOB="$job" NODE=$i MUSTER_TELEMETRY_GRACE_MS=1500 -- --nnodes 2 --nproc-per-node 1 \
            --no-python --gpu-telemetry 0.5 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id "$job" \
            --rdzv-conf join_timeout=30,last_call_timeout=1 --local-addr 127.0.0.$((i + 1)) "$@" "$T/w.sh"
    done
}

# run_job3 JOB OPTION...: the three agents of job JOB (127.0.0.1-3)
run_job3() {
    local job=$1 i
    shift
    for i in 0 1 2; do
        agent "$job$i" MUSTER_NVML_LIBRARY="$FAKE_NVML" FAKE_NVML_SCENARIO="$T/$job.$i.scn" \
            WDIR="$T/w" JOB="$job" NODE=$i MUSTER_TELEMETRY_GRACE_MS=1500 -- --nproc-per-node 1 \
            --no-python --gpu-telemetry 0.5 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id "$job" \
            --rdzv-conf join_timeout=30,last_call_timeout=1 --local-addr 127.0.0.$((i + 1)) "$@" "$T/w.sh"
    done
}

job_status() {
    http_get "$SHTTP" /status
    jq -c --arg j "$1" '.jobs[] | select(.id == $j)' "$T/http.body" > "$T/job.json" 2>/dev/null
}

# both_seen JOB: both nodes' telemetry in /status shows its rank's process
both_seen() {
    job_status "$1"
    [ "$(jq -c '[.nodes[].telemetry.gpus[0].procs[0].rank] | sort' "$T/job.json" 2>/dev/null)" = "[0,1]" ]
}

# all_seen JOB N: N nodes' telemetry in /status shows its rank's process
all_seen() {
    job_status "$1"
    [ "$(jq '[.nodes[].telemetry.gpus[0].procs[0].rank | select(. != null)] | length' "$T/job.json" 2>/dev/null)" = "$2" ]
}

# placed: R1, the group rank (and the rank: one worker per node) of agent 1 (127.0.0.2), and R0
placed() {
    R1=$(jq '.nodes[] | select(.addr == "127.0.0.2") | .group_rank' "$T/job.json")
    R0=$((1 - R1))
}

# warned JOB N: the job's /status has N warnings
warned() {
    job_status "$1"
    [ "$(jq '.warnings | length' "$T/job.json" 2>/dev/null)" = "$2" ]
}

finish_job() {
    touch "$T/w/stop.$1"
    agents_exit 60 0 "${1}0" "${1}1"
}

# --- apart: memory far apart, node 1 idle ---
scn apart 0 97 30 1980
scn apart 1 20 2 1980
run_job apart
wait_for 30 both_seen apart || { show_all; cat "$T/job.json" >&2; fail "/status never showed both nodes' processes"; }
wait_for 15 warned apart 2 || { show_all; cat "$T/job.json" >&2; fail "job apart: not 2 warnings"; }
placed
jq -r '.warnings[]' "$T/job.json" > "$T/warn.txt"
grep -q "^GPU memory far apart across the ranks: rank $R0 holds 30.0 GiB (GPU 0 of .*), rank $R1 2.0 GiB (GPU 0 of .*)\$" "$T/warn.txt" ||
    { cat "$T/warn.txt" >&2; fail "no memory warning"; }
grep -q "^GPU 0 of .* (node $R1) is a straggler: 20 % busy while its peers' median is 97 %\$" "$T/warn.txt" ||
    { cat "$T/warn.txt" >&2; fail "no straggler warning"; }
sleep 2 # more samples: said once
job_status apart
expect_eq "job apart's warnings after more samples" 2 "$(jq '.warnings | length' "$T/job.json")"
expect_eq "memory warnings in the server's log" 1 "$(grep -c 'job apart: GPU memory far apart' "$SERR")"
expect_eq "straggler warnings in the server's log" 1 "$(grep -c 'job apart: GPU 0 of .* is a straggler' "$SERR")"
# and on both agents' consoles (NOTICE), once each
for a in apart0 apart1; do
    expect_eq "straggler warnings on $a's console" 1 "$(grep -c "GPU 0 of .* (node $R1) is a straggler: 20 % busy" "$T/$a.err")"
    expect_eq "memory warnings on $a's console" 1 "$(grep -c 'GPU memory far apart across the ranks' "$T/$a.err")"
done
finish_job apart

# --- clock: the same work, node 1's clock far below ---
scn clock 0 97 30 1980
scn clock 1 95 30 900
run_job clock
wait_for 30 both_seen clock || { show_all; fail "job clock: /status never showed both nodes"; }
wait_for 15 warned clock 1 || { show_all; cat "$T/job.json" >&2; fail "job clock: not 1 warning"; }
placed
grep -q "GPU 0 of .* (node $R1) is a straggler: SM clock 900 MHz while its peers' median is 1980 MHz" "$T/job.json" ||
    { cat "$T/job.json" >&2; fail "no clock straggler warning"; }
finish_job clock

# --- drift: the straggler's figures change every sample; each warning is still said once ---
scn drift 0 97 30 1980
scn drift 1 20 2 1980
run_job drift
wait_for 30 both_seen drift || { show_all; fail "job drift: /status never showed both nodes"; }
for u in 21 22 23 24 25 26 27 28; do # 4 s: samples every 0.5 s, judged every second
    scn drift 1 $u $((u - 18)) 1980
    sleep 0.5
done
job_status drift
expect_eq "job drift's warnings" 2 "$(jq '.warnings | length' "$T/job.json")"
expect_eq "drift: straggler warnings in the server's log" 1 "$(grep -c 'job drift: GPU 0 of .* is a straggler' "$SERR")"
expect_eq "drift: memory warnings in the server's log" 1 "$(grep -c 'job drift: GPU memory far apart' "$SERR")"
expect_eq "drift: straggler warnings on node 0's console" 1 "$(grep -c 'is a straggler' "$T/drift0.err")"
finish_job drift

# --- exclude: node 1 straggles, named twice, excluded; nodes 0 and 2 go on ---
scn excl 0 97 30 1980
scn excl 1 20 30 1980
scn excl 2 95 30 1980
run_job3 excl --nnodes 2:3 --exclude-stragglers 2 --max-restarts 3
wait_for 30 all_seen excl 3 || { show_all; fail "job excl: /status never showed the 3 nodes"; }
agent_wait excl1 40
expect_agent_rc excl1 3 # refused: a rendezvous failure
grep -q "node .* (127.0.0.2) is excluded from job excl: its GPU was named a straggler 2 times (last: GPU 0 of .* is a straggler: 20 % busy" "$T/excl1.err" \
    || { show_all; fail "agent excl1's stderr lacks the exclusion line"; }
grep -q "job excl: excluding node .* (--exclude-stragglers 2): its GPU was named a straggler 2 times" "$SERR" \
    || { cat "$SERR" >&2; fail "the server did not log the straggler's exclusion"; }
expect_eq "straggler warnings of job excl" 1 "$(grep -c 'job excl: GPU 0 of .* is a straggler' "$SERR")"
job_status excl
jq -e '[.node_failures[] | select(.addr == "127.0.0.2" and .excluded and (.reason | test("^its GPU was named a straggler 2 times")))] | length == 1' "$T/job.json" > /dev/null ||
    { cat "$T/job.json" >&2; fail "/status does not list node 1 as excluded for straggling"; }
for a in excl0 excl2; do
    grep -q 'restarting workers (restart 1/3)' "$T/$a.err" || { show_all; fail "$a did not restart without node 1"; }
done
touch "$T/w/stop.excl"
agents_exit 60 0 excl0 excl2

# --- liar: node 0 claims 16 GPUs at 100 %, nodes 1 and 2 run at 40 %: the per-GPU judgement
# names them stragglers (a warning), but against the other nodes, each counted once, they do
# not lag (40 against the median of 100 and 40): --exclude-stragglers 1 excludes nobody ---
{
    echo "# util used total sm mem temp power_mw throttle"
    for g in $(seq 0 15); do echo "gpu 100 $((31 * GiB)) $((80 * GiB)) 1980 2619 61 412000 0"; done
    for g in $(seq 0 15); do echo "proc $g $T/w/pid.liar.n0 $((30 * GiB))"; done
} > "$T/liar.0.scn"
scn liar 1 40 30 1980
scn liar 2 40 30 1980
run_job3 liar --nnodes 3 --exclude-stragglers 1 --max-restarts 3
wait_for 30 all_seen liar 3 || { show_all; fail "job liar: /status never showed the 3 nodes"; }
sleep 5 # more than three graces
job_status liar
expect_eq "nodes excluded by a lying node's figures" 0 "$(jq '[.node_failures[]? | select(.excluded)] | length' "$T/job.json")"
grep -q 'job liar: excluding' "$SERR" && { cat "$SERR" >&2; fail "a lying node's figures got another node excluded"; }
touch "$T/w/stop.liar"
agents_exit 60 0 liar0 liar1 liar2
grep -q 'restarting workers' "$T/liar1.err" && { show_all; fail "job liar restarted"; }

# --- healthy: close figures, nothing said ---
scn good 0 97 30 1980
scn good 1 94 29 1965
run_job good
wait_for 30 both_seen good || { show_all; fail "job good: /status never showed both nodes"; }
sleep 3 # twice the grace
job_status good
expect_eq "the healthy job's warnings" "[]" "$(jq -c '.warnings' "$T/job.json")"
finish_job good
grep -q 'job good:' "$SERR" && { cat "$SERR" >&2; fail "the healthy job was warned of"; }
stop_server
exit 0
