#!/bin/bash
# `muster run --standalone --http 0`: the run's own server serves the dashboard, /status, /logs and
# /metrics on a free loopback port, named on the console with the file holding its read-only
# credential (0600, an observer credential, never on the console itself); /status and /logs
# refuse a request without it (401) and answer with it (the job, the workers' lines); the file
# is removed at the end. A bad --http is a usage error (exit 2, one line); a node that does not
# host the rendezvous says it has no dashboard.
. "$(dirname "$0")/lib.sh"

need_cmd curl "for HTTP"
need_cmd jq "to read /status"
mkdir -p "$T/w"
cat > "$T/w.sh" <<'SH'
#!/bin/bash
echo "standalone line of rank $RANK"
echo "$TORCHELASTIC_RUN_ID" > "$WDIR/id.$RANK"
while [ ! -e "$WDIR/stop" ]; do sleep 0.1; done
SH
chmod +x "$T/w.sh"
OUTF=$T/a.out ERRF=$T/a.err mrun_bg WDIR="$T/w" -- run --standalone --nproc-per-node 2 --http 0 \
    --no-python "$T/w.sh"
APID=$MPID
wait_for 30 grep -q 'dashboard on http://127.0.0.1:[0-9]*/ (read-only credential in ' "$T/a.err" ||
    { cat "$T/a.err" >&2; fail "no dashboard line"; }
line=$(grep 'dashboard on http://' "$T/a.err")
URL=$(sed -n 's|.*dashboard on \(http://127.0.0.1:[0-9]*\)/ .*|\1|p' <<<"$line")
CRED=$(sed -n 's|.*read-only credential in \([^:]*\): open.*|\1|p' <<<"$line")
note "$URL, credential in $CRED"
[ -f "$CRED" ] || fail "no credential file at '$CRED'"
expect_eq "the credential file's mode" 600 "$(stat -c %a "$CRED")"
grep -q '^muster-observer-v1:' "$CRED" || fail "the file holds no observer credential"
grep -qF "$(cat "$CRED")" "$T/a.err" "$T/a.out" && fail "the credential was printed on the console"
wait_for 30 test -s "$T/w/id.1" || { cat "$T/a.err" >&2; fail "the workers did not start"; }
ID=$(cat "$T/w/id.0")

code() { curl -s -m 5 -o "$T/b" -w '%{http_code}' "$@" || echo 000; }
expect_eq "/ (the dashboard's page)" 200 "$(code "$URL/")"
grep -q '<script src="/app.js"' "$T/b" || fail "/ is not the dashboard"
expect_eq "/status without the credential" 401 "$(code "$URL/status")"
expect_eq "/logs without the credential" 401 "$(code "$URL/logs?job=$ID")"
H="Authorization: Bearer $(cat "$CRED")"
expect_eq "/status with it" 200 "$(code -H "$H" "$URL/status")"
expect_eq "the job in /status" "$ID" "$(jq -r '.jobs[0].id' "$T/b")"
got_lines() {
    [ "$(code -H "$H" "$URL/logs?job=$ID")" = 200 ] && [ "$(jq '.lines | length' "$T/b")" = 2 ]
}
wait_for 15 got_lines || { cat "$T/b" >&2; fail "/logs never had both ranks' lines"; }
expect_eq "the lines" "standalone line of rank 0,standalone line of rank 1" \
    "$(jq -r '[.lines[].text] | sort | join(",")' "$T/b")"
expect_eq "/metrics" 200 "$(code "$URL/metrics")"
: > "$T/w/stop"
wait_rc "$APID" 30
expect_eq "the run's exit" 0 "$RC"
[ -e "$CRED" ] && fail "the credential file is still there after the run"

# a bad value: one line, exit 2
IT_TIMEOUT=10 mrun -- run --standalone --http 'x:99999' --no-python true
expect_rc "--http x:99999" 2
grep -q -- "--http must be PORT or HOST:PORT" "$T/err" || { cat "$T/err" >&2; fail "no error line for --http x:99999"; }
# a node that does not host the rendezvous (its endpoint is another host's): it says so
IT_TIMEOUT=10 mrun -- run --nnodes 1 --rdzv-endpoint 192.0.2.1:29400 --rdzv-conf join_timeout=1 \
    --http 0 --no-python true
grep -q -- "--http: this node does not host the rendezvous server" "$T/err" ||
    { cat "$T/err" >&2; fail "a node that hosts nothing did not say it has no dashboard"; }
assert_no_marked_left "after the runs" 5
exit 0
