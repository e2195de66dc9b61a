#!/bin/bash
# Trust between jobs on one shared `muster server` (docs/SECURITY.md's table): a tenant
# holding a valid credential of job A — A's job credential, or the worker credential that A's
# workers get — attacks job B while B runs: attach to B's KV store, join B, squat a job id
# outside its scope, rejoin as one of B's nodes (node id read from /status), fail B with the FINAL
# flag, read B's status. Each is refused with an ERROR (code 3 AUTH), the refusals are counted
# and logged once per address and kind, and B finishes with its own exit code. A teammate
# holding B's credential cannot act for one of B's nodes without that node's secret either.
# The real binary, a real server, and tests/peers/rdzv_poke as the hostile client.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_tool POKE RDZV_POKE rdzv_poke
need_cmd curl "for /status and /metrics"

start_token_server
A=ja-$$ B=jb-$$
for spec in "a --job $A" "b --job $B" "ro --read-only"; do
    set -- $spec
    name=$1
    shift
    job_token "$T/$name.tok" "$@"
done
grep -q "^muster-job-v1:$B:" "$T/b.tok" || fail "job credential of B has the wrong form"
[ "$(stat -c %a "$T/b.tok")" = 600 ] || fail "muster token --out wrote a file that is not 0600"

# Job B: two agents with B's credential; the workers hold until $T/wb/release exists.
mkdir -p "$T/wb" "$T/wa"
for i in 0 1; do
    agent b$i -u MUSTER_TOKEN -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint "$EP" --rdzv-id $B \
        --token-file "$T/b.tok" --rdzv-conf join_timeout=60 --no-python "$WORKER" hold "$T/wb"
done
wait_for 60 test -e "$T/wb/ready.0.0" -a -e "$T/wb/ready.1.0" || { show_all; fail "job B did not start"; }

# Job A: one agent with A's credential; its worker leaves its environment behind.
agent a0 -u MUSTER_TOKEN -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint "$EP" --rdzv-id $A \
    --token-file "$T/a.tok" --rdzv-conf join_timeout=60 --no-python "$WORKER" dump "$T/wa"
agent_wait a0 60
expect_agent_rc a0 0
AW=$(envval "$T/wa/env.0.0" MUSTER_TOKEN)
case "$AW" in muster-worker-v1:$A:*) ;; *) fail "A's worker got no worker credential of A" ;; esac
grep -q "$(cut -d: -f3 "$T/a.tok")" "$T/wa/env.0.0" && fail "A's job credential reached A's worker"

# B's node ids, as anyone who can read /status sees them.
http_get "$SHTTP" /status
IDS=$(grep -o '"node_id": *"[0-9a-f]*"' "$T/http.body" | grep -o '[0-9a-f]\{16\}')
[ "$(wc -w <<< "$IDS")" = 2 ] || fail "expected B's two node ids in /status, got: $IDS"
NODE=$(head -1 <<< "$IDS")

# poke EXPECT CRED ACTION...: runs rdzv_poke with credential CRED (a string) and checks that its
# answer line starts with EXPECT.
poke() {
    local expect=$1 cred=$2 out
    shift 2
    out=$(MUSTER_TOKEN=$cred timeout 30 "$POKE" "$EP" "$@" 2>&1 | head -1)
    case "$out" in
    "$expect"*) note "refused as expected: $* -> $out" ;;
    *) show_all; fail "rdzv_poke $*: expected '$expect...', got '$out'" ;;
    esac
}
AJ=$(cat "$T/a.tok") BJ=$(cat "$T/b.tok") RO=$(cat "$T/ro.tok")

# A's worker credential: only ATTACH to A.
poke "ERROR 3" "$AW" attach $B            # B's KV store (NCCL unique id, barriers)
poke "ERROR 3" "$AW" join $A 1             # acting for its own agent
poke "ERROR 3" "$AW" status $B
poke "ERROR 3" "$AW" status -
poke "ERROR 3" "$AW" failfinal $B 2
# B's own worker credential is what admits B's workers (A has finished, so a control on A
# would only meet a closed job).
BW=$(envval "$T/wb/env.0.0" MUSTER_TOKEN)
poke "OK ATTACH_OK" "$BW" attach $B
poke "ERROR 3" "$BW" attach $A
# A's job credential: nothing of B, no job outside its scope.
poke "ERROR 3" "$AJ" attach $B
poke "ERROR 3" "$AJ" join $B 2
poke "ERROR 3" "$AJ" rejoin $B "$NODE"
poke "ERROR 3" "$AJ" failfinal $B 2
poke "ERROR 3" "$AJ" status $B
poke "ERROR 3" "$AJ" join squat-$$ 1      # a job id nobody gave it: cannot be squatted
out=$(MUSTER_TOKEN=$AJ timeout 30 "$POKE" "$EP" status - 2>&1)
mentions "$out" "$B" && fail "A's status of 'every job' shows job B"
out=$(MUSTER_TOKEN=$(cat "$T/b.tok") timeout 30 "$POKE" "$EP" status - 2>&1)
mentions "$out" "\"$B\"" || fail "B's status of its jobs does not show B: $out"
# A teammate with B's credential cannot act for one of B's nodes without its secret.
poke "ERROR 3" "$BJ" rejoin $B "$NODE"
poke "ERROR 3" "$BJ" joinas $B 2 "$NODE"
# Read-only: status of every job, nothing else. No credential: no TLS.
poke "OK STATUS" "$RO" status $B
poke "ERROR 3" "$RO" join $B 2
poke "ERROR 3" "$RO" attach $B
poke "FAIL" "wrong-$$" status -
poke "FAIL" "muster-job-v1:$B:$(printf '0%.0s' $(seq 64))" status $B

# B did not notice: both agents still run round 0, nothing restarted.
for i in 0 1; do kill -0 "${APID[b$i]}" 2>/dev/null || { show_all; fail "agent b$i died under attack"; }; done
[ "$(wc -l < "$T/wb/starts")" = 2 ] || { show_all; fail "B's workers restarted under attack"; }
: > "$T/wb/release"
agents_exit 60 0 b0 b1

# Counted and logged once per address and kind (the server's log is not flooded).
http_get "$SHTTP" /metrics
n=$(sed -n 's/^muster_auth_failures_total{reason="job_scope"} \([0-9]*\)$/\1/p' "$T/http.body")
[ "${n:-0}" -ge 14 ] || fail "muster_auth_failures_total{reason=\"job_scope\"} = '${n:-}', expected >= 14"
n=$(sed -n 's/^muster_auth_failures_total{reason="node_secret"} \([0-9]*\)$/\1/p' "$T/http.body")
[ "${n:-0}" -ge 2 ] || fail "node_secret refusals counted '${n:-}', expected >= 2"
lines=$(grep -c "refused .*: job_scope: " "$SERR")
[ "$lines" = 1 ] || { cat "$SERR" >&2; fail "expected one log line for the scope refusals, got $lines"; }
stop_server
assert_no_marked_left "after the jobs" 5
