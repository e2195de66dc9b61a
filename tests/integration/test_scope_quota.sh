#!/bin/bash
# one prefix credential used to take every job slot (4,096 silent JOINs with
# teamA-* in 25 s, then team B got "server full"). Now jobs and connections are counted per job
# credential scope: teamA-*'s silent JOINs (rdzv_poke, holding their connections) fill its job
# quota and its connection quota, the next ones are refused with texts that name the credential
# and the flag, counted in /metrics; then team B's job starts and finishes with its own exit code.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_tool POKE RDZV_POKE rdzv_poke
need_cmd curl "for /metrics"

start_token_server --max-jobs-per-credential 3 --max-connections-per-credential 5
B=teamB-$$
job_token "$T/a.tok" --job 'teamA-*'
job_token "$T/b.tok" --job "$B"
AT=$(cat "$T/a.tok")

# team A: three silent JOINs of three new jobs (nnodes 2: they wait), each holding its connection
pokes=()
for i in 1 2 3; do
    MUSTER_TOKEN=$AT MUSTER_POKE_HOLD=25 timeout 40 "$POKE" "$EP" join "teamA-$$-$i" 2 \
        >"$T/poke$i.out" 2>&1 &
    pokes+=($!)
done
three() { [ "$(grep -l '^OK WAITING' "$T"/poke[123].out 2>/dev/null | wc -l)" = 3 ]; }
wait_for 20 three || fail "team A's silent JOINs were not admitted: $(cat "$T"/poke*.out)"
out=$(MUSTER_TOKEN=$AT timeout 30 "$POKE" "$EP" join "teamA-$$-4" 2 2>&1)
case "$out" in
"ERROR 1 credential job:teamA-* holds 3 jobs, its limit (muster server --max-jobs-per-credential)"*) ;;
*) fail "team A's 4th job: got '$out'" ;;
esac
# two more connections reach teamA-*'s connection quota (5); the next HELLO is refused
for i in 5 6; do
    MUSTER_TOKEN=$AT MUSTER_POKE_HOLD=25 timeout 40 "$POKE" "$EP" hello agent >"$T/poke$i.out" 2>&1 &
    pokes+=($!)
done
five() { [ "$(grep -l '^OK WELCOME' "$T"/poke[56].out 2>/dev/null | wc -l)" = 2 ]; }
wait_for 20 five || fail "team A's connections 4 and 5 were not admitted: $(cat "$T"/poke[56].out)"
out=$(MUSTER_TOKEN=$AT timeout 30 "$POKE" "$EP" hello agent 2>&1)
case "$out" in
"ERROR 1 credential job:teamA-* holds 5 connections, its limit (muster server --max-connections-per-credential)"*) ;;
*) fail "team A's 6th connection: got '$out'" ;;
esac

# team B is unaffected: its job starts and finishes with its own exit code
agent b -u MUSTER_TOKEN -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint "$EP" --rdzv-id "$B" \
    --token-file "$T/b.tok" --rdzv-conf join_timeout=30 --no-python /bin/bash -c 'exit 0'
agent_wait b 40
expect_agent_rc b 0

http_get "$SHTTP" /metrics
for l in jobs_per_credential connections_per_credential; do
    grep -q "^muster_limit_hits_total{limit=\"$l\"} [1-9]" "$T/http.body" \
        || fail "refusals not counted as $l: $(grep limit_hits "$T/http.body")"
done
grep -q '^muster_limit_hits_total{limit="jobs"} 0$' "$T/http.body" || fail "the server-wide job cap was hit"
for pid in "${pokes[@]}"; do kill "$pid" 2>/dev/null; done
for pid in "${pokes[@]}"; do wait "$pid" 2>/dev/null; done
stop_server
exit 0
