#!/bin/bash
# The dashboard's files over plain HTTP (docs/DASHBOARD.md), no browser: `/`, `/index.html`,
# `/app.js` and `/style.css` are served to anyone with their Content-Type, a strict
# Content-Security-Policy (default-src 'self', no 'unsafe-inline'), nosniff and no caching;
# HEAD gives the head only; the page loads only its own script and style sheet (no inline
# script, style or handler, nothing from elsewhere) and the script builds no HTML from strings.
# /status stays behind the observer credential (401 without one, with a garbage one and with a
# job credential; 200 with the observer's, not cached), also right after a flood of 400 asset
# requests, which the server answers without falling over (/metrics counts them).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_cmd curl "for the HTTP checks"
SERVER_HTTP_PRIVATE=1 start_server
[ -n "$SHTTP" ] || fail "the server printed no http address"
IT_TIMEOUT=10 mrun -- token --read-only --out "$T/obs.tok"
[ "$RC" = 0 ] || fail "muster token --read-only failed: $(cat "$T/err")"
IT_TIMEOUT=10 mrun -- token --job "some-job-$$" --out "$T/job.tok"
[ "$RC" = 0 ] || fail "muster token --job failed: $(cat "$T/err")"

# get METHOD PATH [CRED_FILE]: head into $T/h (lower-cased names), body into $T/b, CODE set
get() {
    local h=()
    [ -n "${3:-}" ] && h=(-H "Authorization: Bearer $(cat "$3")")
    local m=(-X "$1")
    CODE=$(curl -s -m 5 "${m[@]}" -D "$T/h" -o "$T/b" -w '%{http_code}' ${h[@]+"${h[@]}"} \
        "http://$SHTTP$2") || CODE=000
    tr -d '\r' < "$T/h" | sed 's/^\([^:]*\):/\L\1:/' > "$T/hl"
}
header() { sed -n "s/^$1: //p" "$T/hl" | head -1; }

for spec in "/|text/html; charset=utf-8" "/index.html|text/html; charset=utf-8" \
    "/app.js|text/javascript; charset=utf-8" "/style.css|text/css; charset=utf-8"; do
    path=${spec%%|*} type=${spec#*|}
    get GET "$path"
    expect_eq "GET $path without a credential" 200 "$CODE"
    expect_eq "Content-Type of $path" "$type" "$(header content-type)"
    expect_eq "X-Content-Type-Options of $path" nosniff "$(header x-content-type-options)"
    expect_eq "Cache-Control of $path" no-store "$(header cache-control)"
    csp=$(header content-security-policy)
    case "$csp" in *"default-src 'self'"*) ;; *) fail "$path: CSP without default-src 'self': '$csp'" ;; esac
    case "$csp" in *"script-src 'self'"*) ;; *) fail "$path: CSP without script-src 'self': '$csp'" ;; esac
    case "$csp" in *unsafe-inline* | *unsafe-eval* | *"*"* | *http:* | *https:*)
        fail "$path: CSP allows more than this origin: '$csp'" ;; esac
    expect_eq "Content-Length of $path" "$(stat -c %s "$T/b")" "$(header content-length)"
    name=${path#/}
    cp "$T/b" "$T/asset.${name:-index}"
done
# the page: its own script and style sheet only, no inline script, style or event handler
page=$T/asset.index
grep -q '<script src="/app.js"' "$page" || fail "/ does not load /app.js"
grep -q '<link rel="stylesheet" href="/style.css">' "$page" || fail "/ does not load /style.css"
[ "$(grep -o '<script' "$page" | wc -l)" = 1 ] || fail "/ has more than one script element"
grep -Eqi '<style|style=| on[a-z]+=|javascript:|//[a-z0-9.-]+\.[a-z]{2,}/' "$page" &&
    fail "/ has inline style or script, or names another origin: $(grep -Ei '<style|style=| on[a-z]+=|javascript:' "$page")"
# outside the header comment, the script never names an HTML sink
sed '1,/\*\//d' "$T/asset.app.js" | grep -En 'innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function' &&
    fail "app.js uses an HTML sink (above)"
sed '1,/\*\//d' "$T/asset.app.js" | grep -Eo 'https?://[^'"'"' ]*' | grep -v '^http://www.w3.org/2000/svg$' &&
    fail "app.js names another origin (above)"
grep -Eo 'url\(|@import|https?://' "$T/asset.style.css" && fail "style.css loads something"
# HEAD: the head only (raw, curl would wait for the announced body)
exec 3<> "/dev/tcp/${SHTTP%:*}/${SHTTP##*:}" || fail "cannot connect to $SHTTP"
printf 'HEAD /app.js HTTP/1.0\r\n\r\n' >&3
timeout 5 cat <&3 > "$T/head.raw"
exec 3<&-
head -1 "$T/head.raw" | grep -q '^HTTP/1.0 200 OK' || fail "HEAD /app.js: $(head -1 "$T/head.raw")"
expect_eq "bytes after the head of HEAD /app.js" 0 "$(sed '1,/^\r$/d' "$T/head.raw" | wc -c)"
grep -q 'Content-Length: [1-9]' "$T/head.raw" || fail "HEAD /app.js has no Content-Length"
get POST /app.js
expect_eq "POST /app.js" 405 "$CODE"
get GET /app.js.map
expect_eq "GET /app.js.map" 404 "$CODE"

# /status: the data, behind the credential
echo "muster-observer-v1:$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$T/bad.tok"
for c in "" "$T/bad.tok" "$T/job.tok"; do
    get GET /status "$c"
    expect_eq "GET /status with '${c:-no credential}'" 401 "$CODE"
    grep -q '"jobs"' "$T/b" && fail "a refused /status sent the document"
done
get GET /status "$T/obs.tok"
expect_eq "GET /status with the observer credential" 200 "$CODE"
expect_eq "Content-Type of /status" application/json "$(header content-type)"
expect_eq "Cache-Control of /status" no-store "$(header cache-control)"
grep -q '"time_ms":' "$T/b" || fail "/status has no server time_ms: $(cat "$T/b")"

# a flood of asset requests: answered, and /status still refused and served as before
seq 1 400 | xargs -P 16 -I{} curl -s -m 10 -o /dev/null "http://$SHTTP/app.js?{}" ||
    fail "the flood of asset requests was not answered"
get GET /status
expect_eq "GET /status without a credential after the flood" 401 "$CODE"
get GET /status "$T/obs.tok"
expect_eq "GET /status with the observer credential after the flood" 200 "$CODE"
get GET /metrics
n=$(sed -n 's/^muster_http_requests_total \([0-9]*\)$/\1/p' "$T/b")
[ "${n:-0}" -ge 400 ] || fail "/metrics counts ${n:-no} HTTP requests after the flood of 400"
stop_server
