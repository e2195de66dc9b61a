#!/bin/bash
# GET /logs (the dashboard's per-rank tail, docs/DASHBOARD.md) on a server with a token: a running
# job of 2 ranks (rank 0 prints 40 numbered lines, rank 1 ten and an HTML injection) forwards its
# output; /logs answers only with the observer credential (401 without one or with another job's
# credential); gives every rank's newest lines in order, one rank's with rank=R, the newest N with
# n=N, the injection as plain JSON text; 404 for an unknown job, 400 for a rank outside the world,
# n=0, n=201, a bad %-escape or no job; and at most 50 answers a second (429 with Retry-After).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_cmd curl "for /logs"
need_cmd jq "to read /logs"
SERVER_HTTP_PRIVATE=1 start_token_server
[ -n "$SHTTP" ] || fail "no HTTP port: $(cat "$SERR")"
JOB=hl-$$
job_token "$T/obs.tok" --read-only
job_token "$T/job.tok" --job "$JOB"
job_token "$T/other.tok" --job "other-$$"
cat > "$T/w.sh" <<'SH'
#!/bin/bash
if [ "$RANK" = 0 ]; then
    for i in $(seq 1 40); do echo "zero line $i"; done
else
    for i in $(seq 1 10); do echo "one line $i"; done
    echo '<img src=x onerror="alert(1)"> & "quotes"'
fi
while [ ! -e "$WDIR/stop" ]; do sleep 0.1; done
SH
chmod +x "$T/w.sh"
mkdir -p "$T/w"
agent a -u MUSTER_TOKEN WDIR="$T/w" -- --nnodes 1 --nproc-per-node 2 --rdzv-endpoint "$EP" \
    --rdzv-id "$JOB" --token-file "$T/job.tok" --no-python "$T/w.sh"

# logs QUERY [CRED_FILE]: GET /logs?QUERY; CODE and $T/b
logs() {
    local h=()
    [ -n "${2:-}" ] && h=(-H "Authorization: Bearer $(cat "$2")")
    CODE=$(curl -s -m 5 -D "$T/h" -o "$T/b" -w '%{http_code}' ${h[@]+"${h[@]}"} \
        "http://$SHTTP/logs?$1") || CODE=000
}
all_in() {
    logs "job=$JOB&n=200" "$T/obs.tok"
    [ "$CODE" = 200 ] && [ "$(jq '.lines | length' "$T/b")" = 51 ]
}
wait_for 30 all_in || { show_all; cat "$T/b" >&2; fail "/logs never held the job's 51 lines (HTTP $CODE)"; }

expect_eq "rank 0's lines in order" "$(seq 1 40 | sed 's/^/zero line /')" \
    "$(jq -r '.lines[] | select(.rank == 0) | .text' "$T/b")"
expect_eq "rank 1's lines in order" "$(seq 1 10 | sed 's/^/one line /'; echo '<img src=x onerror="alert(1)"> & "quotes"')" \
    "$(jq -r '.lines[] | select(.rank == 1) | .text' "$T/b")"
grep -qF '"text":"<img src=x onerror=\"alert(1)\"> & \"quotes\""' "$T/b" ||
    { cat "$T/b" >&2; fail "the injection is not plain JSON text"; }
grep -qi '^content-type: application/json' "$T/h" || fail "/logs is not application/json"
grep -qi '^cache-control: no-store' "$T/h" || fail "/logs may be cached"

logs "job=$JOB&rank=1" "$T/obs.tok"
expect_eq "rank=1's ranks" "[1]" "$(jq -c '[.lines[].rank] | unique' "$T/b")"
expect_eq "rank=1's count" 11 "$(jq '.lines | length' "$T/b")"
logs "job=$JOB&rank=0&n=3" "$T/obs.tok"
expect_eq "the newest 3 of rank 0" "zero line 38,zero line 39,zero line 40" "$(jq -r '[.lines[].text] | join(",")' "$T/b")"
logs "job=$(printf %s "$JOB" | sed 's/-/%2D/g')&n=1" "$T/obs.tok" # %-encoded job id
expect_eq "a %-encoded job id" 200 "$CODE"

for c in "" "$T/other.tok"; do
    logs "job=$JOB" "$c"
    expect_eq "/logs with credential '${c##*/}'" 401 "$CODE"
done
logs "job=nope-$$" "$T/obs.tok"; expect_eq "an unknown job" 404 "$CODE"
for q in "job=$JOB&rank=2" "job=$JOB&rank=-2" "job=$JOB&n=0" "job=$JOB&n=201" "job=$JOB&n=x" \
    "job=%zz" "rank=0" "job="; do
    logs "$q" "$T/obs.tok"
    expect_eq "/logs?$q" 400 "$CODE"
done

# the cap: after a quiet second, 120 requests back to back (one curl): the first 50 answered (50
# more if a second passed meanwhile), the others 429 with Retry-After
sleep 1.1
urls=()
for _ in $(seq 1 120); do urls+=(-o /dev/null "http://$SHTTP/logs?job=$JOB&n=1"); done
codes=$(curl -s -m 20 -H "Authorization: Bearer $(cat "$T/obs.tok")" -w '%{http_code}\n' "${urls[@]}")
n429=$(grep -c '^429$' <<<"$codes")
n200=$(grep -c '^200$' <<<"$codes")
note "120 requests back to back: $n200 answered, $n429 refused (429)"
[ "$n429" -ge 20 ] && [ "$n200" -ge 50 ] && [ "$n200" -le 100 ] && [ $((n200 + n429)) = 120 ] ||
    fail "the /logs cap: $n200 x 200, $n429 x 429 of 120 ($(sort <<<"$codes" | uniq -c | tr '\n' ' '))"
logs "job=$JOB&n=1" "$T/obs.tok"
[ "$CODE" = 429 ] && { grep -qi '^retry-after: 1' "$T/h" || fail "429 without Retry-After"; }
sleep 1.1
logs "job=$JOB&n=1" "$T/obs.tok"
expect_eq "/logs after the second" 200 "$CODE"

: > "$T/w/stop"
agents_exit 30 0 a
stop_server
exit 0
