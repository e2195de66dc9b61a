#!/bin/bash
# The dashboard in a real browser (docs/DASHBOARD.md): headless Chromium, driven by selenium
# (dashboard_browser.py), opens `muster server --http`'s page with the observer credential in the
# URL's fragment while a 2-node job runs on loopback (dash_worker.sh). Asserted there: both nodes
# are shown running with heartbeat ages; the second node's host name is an HTML injection
# (`<img src=x onerror=...>`, set in a UTS namespace) and is shown as that text, with no element
# made from it and no script run; a SIGKILLed worker's restart appears with its cause (the kill,
# rank 1) within 2 s of the kill without a reload; a checkpoint appears with its step (120); at
# phone width the page does not scroll sideways; the console has no error. Screenshots are kept
# (their paths are printed). Before the browser, /status over HTTP is refused without a
# credential, with another job's credential and with the job's worker credential; after it,
# /status holds that restart (round 0, rank 1, signal 9, counted) and the checkpoint's age.
# Skips (77) without root (the UTS namespace), Chromium, chromedriver or python3-selenium.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

[ "$(id -u)" = 0 ] || skip "needs root for a UTS namespace (the injected host name)"
need_cmd unshare "(util-linux) for the injected host name"
need_cmd curl "for /status"
[ -x /usr/bin/chromium ] || skip "Debian's chromium is not installed (tools/bootstrap.sh)"
[ -x /usr/bin/chromedriver ] || skip "Debian's chromium-driver is not installed (tools/bootstrap.sh)"
/usr/bin/python3 -c 'import selenium' 2>/dev/null || skip "python3-selenium is not installed"
unshare --uts true 2>/dev/null || skip "cannot make a UTS namespace here"

DW="$IT_DIR/dash_worker.sh"
EVIL='<img src=x onerror="window.__pwned=1">'
SERVER_HTTP_PRIVATE=1 start_server
[ -n "$SHTTP" ] || fail "the server printed no http address"
JOB=dash-$$
mkdir -p "$T/w" "$T/c1" "$T/c2"
IT_TIMEOUT=10 mrun -- token --read-only --out "$T/obs.tok"
[ "$RC" = 0 ] || fail "muster token --read-only failed: $(cat "$T/err")"
IT_TIMEOUT=10 mrun -- token --job "other-$$" --out "$T/other.tok"
[ "$RC" = 0 ] || fail "muster token --job failed: $(cat "$T/err")"

RUN=(--nnodes 2 --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$SPORT" --rdzv-id "$JOB"
    --rdzv-conf join_timeout=30 --max-restarts 3 --local-addr 127.0.0.1)
agent a1 -- "${RUN[@]}" --checkpoint-dir "$T/c1" --no-python "$DW" "$T/w"
sleep 0.3 # a1 first: group rank 0
# a2 in a UTS namespace of its own, named EVIL (sethostname takes any bytes)
# shellcheck disable=SC2016 # expanded by that sh, not here
env --default-signal=INT,QUIT,TERM MUSTER_IT_MARK="$MARK" unshare --uts sh -c \
    'printf %s "$0" > /proc/sys/kernel/hostname && exec "$@"' "$EVIL" \
    "$MUSTER_BIN" run "${RUN[@]}" --checkpoint-dir "$T/c2" --no-python "$DW" "$T/w" \
    > "$T/a2.out" 2> "$T/a2.err" &
APID["a2"]=$!
IT_BG_PIDS="$IT_BG_PIDS $!"
wait_for 30 files_at_least 2 "$T/w/ready.*.0" || { show_all; fail "the 2 workers did not start"; }

# /status: the credential is needed, and only an observer's (or the secret) will do
http_status() { # CRED_FILE or "": sets HTTP_CODE
    local h=()
    [ -n "$1" ] && h=(-H "Authorization: Bearer $(cat "$1")")
    HTTP_CODE=$(curl -s -m 5 -o "$T/http.body" -w '%{http_code}' ${h[@]+"${h[@]}"} \
        "http://$SHTTP/status") || HTTP_CODE=000
}
envval "$T/w/env.0.0" MUSTER_TOKEN > "$T/worker.tok" || fail "the worker got no MUSTER_TOKEN"
grep -q "^muster-worker-v1:$JOB:" "$T/worker.tok" || fail "the worker's MUSTER_TOKEN is no worker credential"
for c in "" "$T/other.tok" "$T/worker.tok"; do
    http_status "$c"
    expect_eq "/status with credential '${c:-none}'" 401 "$HTTP_CODE"
    grep -q "$JOB" "$T/http.body" && fail "/status refused yet names the job"
done
http_status "$T/obs.tok"
expect_eq "/status with the observer credential" 200 "$HTTP_CODE"
grep -qF "\"host\":\"<img src=x onerror=\\\"window.__pwned=1\\\">\"" "$T/http.body" ||
    { head -c 2000 "$T/http.body" >&2; fail "/status does not carry the injected host name"; }

# the browser
OBS=$(cat "$T/obs.tok")
timeout -k 5 150 /usr/bin/python3 "$IT_DIR/dashboard_browser.py" "http://$SHTTP/#cred=$OBS" \
    "$T/w" "$EVIL" "$T" > "$T/browser.out" 2>&1
brc=$?
sed 's/^/  browser: /' "$T/browser.out" >&2
[ -s "$T/dashboard.png" ] && {
    keep=${MUSTER_BUILD:-$MUSTER_SRC/build}/tests/artifacts
    mkdir -p "$keep" && cp "$T/dashboard.png" "$keep/dashboard_browser.png" &&
        cp "$T/dashboard-phone.png" "$keep/dashboard_browser-phone.png" 2>/dev/null
    note "screenshots: $keep/dashboard_browser.png $keep/dashboard_browser-phone.png"
}
[ "$brc" = 0 ] || { show_all; fail "the browser checks failed (exit $brc)"; }

# what the page showed, in /status: the restart history and the checkpoint's age
if command -v jq >/dev/null 2>&1; then
    http_status "$T/obs.tok"
    jq -e --arg j "$JOB" '.server.time_ms > 0 and (.jobs[] | select(.id == $j) |
        .restarts_seen == 1 and (.restarts | length) == 1 and
        (.restarts[0] | .round == 0 and .rank == 1 and .signal == 9 and .counted and
            (.final | not) and .restart_count == 1 and .age_s >= 0 and .time_ms > 0) and
        (.checkpoints[0] | .step == 120 and .age_s >= 0))' "$T/http.body" >/dev/null ||
        { head -c 3000 "$T/http.body" >&2; fail "/status lacks the restart history or checkpoint age"; }
fi

: > "$T/w/release"
agents_exit 30 0 a1 a2
stop_server
assert_no_marked_left "after the job" 5
