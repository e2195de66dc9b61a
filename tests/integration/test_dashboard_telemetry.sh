#!/bin/bash
# The dashboard's GPU rows and warnings, in headless Chromium (dashboard_telemetry.py): the files
# `muster server --http` serves, put behind a /status that plays per-node "telemetry" objects and
# a job's "warnings" (what the agents' GPU telemetry adds to /status) changing at every poll,
# beside a node without telemetry and a job without any lists. Asserted: a row per GPU with
# throttle reason and processes by rank, utilisation and memory sparklines that grow per poll,
# the warnings listed as text, HTML-injection strings (a warning, a host) shown as text with no
# element made and no script run, the job without lists shown too, no console error; a
# screenshot is kept. Skips (77) without Chromium, chromedriver or python3-selenium.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_cmd curl "for the dashboard's files"
[ -x /usr/bin/chromium ] || skip "Debian's chromium is not installed (tools/bootstrap.sh)"
[ -x /usr/bin/chromedriver ] || skip "Debian's chromium-driver is not installed (tools/bootstrap.sh)"
/usr/bin/python3 -c 'import selenium' 2>/dev/null || skip "python3-selenium is not installed"

SERVER_HTTP_PRIVATE=1 start_server
[ -n "$SHTTP" ] || fail "the server printed no http address"
mkdir -p "$T/assets"
for f in index.html app.js style.css favicon.svg; do
    code=$(curl -s -m 5 -o "$T/assets/$f" -w '%{http_code}' "http://$SHTTP/$f") || code=000
    expect_eq "GET /$f" 200 "$code"
done
stop_server

timeout -k 5 120 /usr/bin/python3 "$IT_DIR/dashboard_telemetry.py" "$T/assets" "$T" \
    > "$T/browser.out" 2>&1
brc=$?
sed 's/^/  browser: /' "$T/browser.out" >&2
if [ -s "$T/dashboard-telemetry.png" ]; then
    keep=${MUSTER_BUILD:-$MUSTER_SRC/build}/tests/artifacts
    mkdir -p "$keep" && cp "$T/dashboard-telemetry.png" "$keep/dashboard_telemetry.png" &&
        note "screenshot: $keep/dashboard_telemetry.png"
fi
[ "$brc" = 0 ] || fail "the browser checks failed (exit $brc)"
