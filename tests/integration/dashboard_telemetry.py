"""The dashboard's GPU rows and warnings (docs/DASHBOARD.md) for test_dashboard_telemetry.sh:

    dashboard_telemetry.py ASSET_DIR SHOT_DIR

Serves the dashboard's files as muster served them (ASSET_DIR: index.html, app.js, style.css,
favicon.svg) on a loopback port of its own, with a /status that plays a job whose nodes carry the
per-node "telemetry" object and the job a "warnings" array (the fields agents' GPU telemetry
adds: the page must show them when present), changing at every request, beside a node without
telemetry and a second job with neither (nothing may break where they are absent). Peer strings
(a warning, a GPU process, a host) are HTML injections; none may become an element. Headless
Chromium checks it. Prints one line per check; exits 0 when all passed, 1 otherwise.
"""
import http.server
import json
import os
import sys
import tempfile
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

ASSETS, SHOTS = sys.argv[1:3]
FAILED = []
EVIL_WARN = '<script>window.__pwned=1</script>ranks 0-1 all run on GPU 0: the script ignores LOCAL_RANK'
EVIL_HOST = 'gpu-b"><svg onload=window.__pwned=2>'
TYPES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
         "style.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
calls = [0]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)
    return ok


def gpu(i, n):
    return {"gpu": i, "util": (n * 17 + i * 40) % 100, "mem_used": (20 + n % 10) << 30,
            "mem_total": 80 << 30, "sm_clock": 1980, "mem_clock": 2619, "temp": 55 + i,
            "power_w": 400.5, "throttle": "power" if i == 1 else "", "xid": 0, "ecc": 0,
            "procs": [{"pid": 100 + i, "rank": i, "mem": (18 + i) << 30},
                      {"pid": 999, "rank": None, "mem": 1 << 20}]}


def status(n):
    node = {"host": "gpu-a", "addr": "10.0.0.1", "node_id": "0000000000000001", "group_rank": 0,
            "nproc": 2, "rank_offset": 0, "state": "running", "last_seen_ms_ago": 300,
            "heartbeat_gap_max_ms": 1000, "telemetry": {"t_ms": 1700000000000 + n * 1000,
                                                        "gpus": [gpu(0, n), gpu(1, n)]}}
    bare = dict(node, host=EVIL_HOST, addr="10.0.0.2", group_rank=1, rank_offset=2)
    del bare["telemetry"]
    job = {"id": "tele", "state": "running", "round": 0, "restart_count": 0, "max_restarts": 3,
           "min_nodes": 2, "max_nodes": 2, "world_size": 4, "resume": None, "resume_step": -1,
           "nodes": [node, bare], "checkpoints": [], "restarts": [], "restarts_seen": 0,
           "node_failures": [], "preflight": [], "goodput": None, "exclude_after": 0,
           "excluded": 0, "spares": 0, "waiting": 0, "evidence": None,
           "warnings": [EVIL_WARN, {"text": "GPU 1 of gpu-a throttled (power)"}]}
    # a job as an older server (or a truncated document) sends it: no lists at all
    old = {"id": "old", "state": "gathering", "round": 0, "restart_count": 0, "max_restarts": 0,
           "min_nodes": 1, "max_nodes": 1, "world_size": 0}
    return {"server": {"uptime_s": 5.0 + n, "time_ms": 1700000000000 + n * 1000,
                       "connections": 2, "jobs": 2}, "jobs": [job, old]}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def send(self, body, ctype):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/status":
            calls[0] += 1
            self.send(json.dumps(status(calls[0])).encode(), "application/json")
            return
        name = "index.html" if path == "/" else path.lstrip("/")
        if name in TYPES:
            with open(os.path.join(ASSETS, name), "rb") as f:
                self.send(f.read(), TYPES[name])
            return
        self.send_error(404)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
url = "http://127.0.0.1:%d/" % srv.server_address[1]

opts = Options()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--no-first-run", "--disable-extensions", "--window-size=1280,1200",
          "--user-data-dir=" + tempfile.mkdtemp(prefix="dash-chromium-", dir=SHOTS)):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
try:
    driver.get(url)
    end = time.monotonic() + 15
    while time.monotonic() < end and driver.execute_script(
            "return document.querySelectorAll('tr.gpu').length;") < 2:
        time.sleep(0.05)
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('tr.gpu')).map(r => "
        "Array.from(r.cells).map(c => c.textContent));")
    print("     GPU rows: %r" % rows)
    check(len(rows) == 2, "two GPU rows (the node without telemetry has none)")
    check(len(rows) == 2 and rows[1][7] == "throttle power", "GPU 1's throttle reason shown")
    check(len(rows) == 2 and "rank 0" in rows[0][8] and "pid 999" in rows[0][8],
          "GPU 0's processes by rank (and the unmapped one by pid)")
    time.sleep(3.5)  # ~3 more polls: the sparklines grow
    pts = driver.execute_script(
        "return Array.from(document.querySelectorAll('tr.gpu svg.spark polyline')).map(p => "
        "p.getAttribute('points').split(' ').length);")
    print("     sparkline points: %r (after %d polls)" % (pts, calls[0]))
    check(len(pts) == 4 and min(pts) >= 3, "utilisation and memory sparklines grow per poll")
    warns = driver.execute_script(
        "return Array.from(document.querySelectorAll('ul.warnings li')).map(e => e.textContent);")
    print("     warnings: %r" % warns)
    check(warns == [EVIL_WARN, "GPU 1 of gpu-a throttled (power)"],
          "the warnings are listed, as text")
    hosts = driver.execute_script(
        "return Array.from(document.querySelectorAll('tr.node td.host')).map(e => e.textContent);")
    check(EVIL_HOST in hosts, "the injected host name shown as text")
    check(driver.execute_script(
        "return document.querySelectorAll('main script, main img, main svg:not(.spark)').length;")
        == 0, "no element made from a peer string")
    check(driver.execute_script("return window.__pwned === undefined;"), "no peer script ran")
    check(driver.execute_script(
        "return document.querySelectorAll('section.job').length;") == 2,
        "the job without lists is shown too")
    check(driver.execute_script(
        "return document.getElementById('conn').textContent;") == "live", "the page is live")
    shot = os.path.join(SHOTS, "dashboard-telemetry.png")
    driver.save_screenshot(shot)
    print("SCREENSHOT " + shot)
    logs = driver.get_log("browser")
    for entry in logs:
        print("     console: %s %s" % (entry.get("level"), entry.get("message")))
    check(not [e for e in logs if e.get("level") == "SEVERE"], "no error in the browser console")
finally:
    driver.quit()
    srv.shutdown()

sys.exit(1 if FAILED else 0)
