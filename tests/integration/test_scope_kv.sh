#!/bin/bash
# Quotas per credential scope (docs/SECURITY.md "Limits and quotas of a shared server"): the KV stores of all the jobs of one job credential
# ("teamA-*") draw on one pool of held KV requests (and bytes), which draws on the server's.
# With --kv-max-held-per-credential 100, job teamA-1's workers hold 80 waiting GETs, job teamA-2's
# get only the 20 left, the rest answered LIMIT and counted as kv_per_credential, while team B's
# job (its own credential) still has its 80 held.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_tool FLOOD RDZV_KVFLOOD rdzv_kvflood
need_cmd curl "for /metrics"

start_token_server --kv-max-held-per-credential 100
job_token "$T/a.tok" --job 'teamA-*'
job_token "$T/b.tok" --job "teamB-$$"

for j in A1 A2 B; do
    case $j in A1) id=teamA-$$-1 tok=a ;; A2) id=teamA-$$-2 tok=a ;; B) id=teamB-$$ tok=b ;; esac
    mkdir -p "$T/w$j"
    agent "$j" -u MUSTER_TOKEN -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint "$EP" --rdzv-id "$id" \
        --token-file "$T/$tok.tok" --rdzv-conf join_timeout=60 --no-python "$WORKER" hold "$T/w$j"
done
for j in A1 A2 B; do
    wait_for 60 test -e "$T/w$j/ready.0.0" || { show_all; fail "job $j did not start"; }
done
# flood J JOBID N: N waiting GETs over 2 worker connections of that job (64 per connection max)
flood() {
    local tok
    tok=$(envval "$T/w$1/env.0.0" MUSTER_TOKEN)
    MUSTER_TOKEN=$tok timeout 60 "$FLOOD" "$EP" "$2" 2 "$3" 60000 30 >"$T/flood$1.out" 2>&1 &
    IT_BG_PIDS="$IT_BG_PIDS $!"
    wait_for 30 grep -q '^SENT\|^FAIL' "$T/flood$1.out" || { show_all; fail "flood $1 did not finish"; }
    read -r _ _ _ LIMIT _ _ _ HELD _ <<<"$(head -1 "$T/flood$1.out")"
    note "flood $1: $(head -1 "$T/flood$1.out")"
}
flood A1 teamA-$$-1 80
expect_eq "held for teamA-1" 80 "$HELD"
flood A2 teamA-$$-2 80
expect_eq "held for teamA-2 (the credential's 100 minus teamA-1's 80)" 20 "$HELD"
expect_eq "refused for teamA-2" 60 "$LIMIT"
flood B teamB-$$ 80
expect_eq "held for team B (another credential)" 80 "$HELD"

http_get "$SHTTP" /metrics
n=$(sed -n 's/^muster_limit_hits_total{limit="kv_per_credential"} \([0-9]*\)$/\1/p' "$T/http.body")
expect_eq "kv_per_credential hits in /metrics" 60 "${n:-0}"
grep -q 'refused .*kv_per_credential: KV request over the waiting requests of credential job:teamA-\*' \
    "$T/server.err" || { cat "$T/server.err" >&2; fail "the refusal was not logged with the credential"; }
for j in A1 A2 B; do touch "$T/w$j/release"; done
for j in A1 A2 B; do
    agent_wait "$j" 60
    expect_agent_rc "$j" 0
done
exit 0
