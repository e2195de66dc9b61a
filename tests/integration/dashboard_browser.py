"""Drives headless Chromium (selenium + chromedriver) against the dashboard of a running 2-node
job for test_dashboard_browser.sh:

    dashboard_browser.py URL WORKDIR EVIL_HOST SHOT_DIR

URL carries the observer credential in its fragment (#cred=...). WORKDIR is the workers' directory
(dash_worker.sh): pid.1.0 is the worker this script SIGKILLs, ckpt.go the file that makes rank 0
write its checkpoint. Prints one line per check; exits 0 when every check passed, 1 otherwise.
"""
import os
import signal
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

URL, WORK, EVIL, SHOTS = sys.argv[1:5]
FAILED = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)
    return ok


def wait(driver, js, timeout, step=0.05):
    """Polls the page's JS expression until it is truthy; returns its value or None."""
    end = time.monotonic() + timeout
    while True:
        v = driver.execute_script("return (" + js + ");")
        if v:
            return v
        if time.monotonic() >= end:
            return None
        time.sleep(step)


profile = tempfile.mkdtemp(prefix="dash-chromium-", dir=SHOTS)
opts = Options()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--no-first-run", "--disable-extensions", "--window-size=1280,1700",
          "--user-data-dir=" + profile):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
try:
    driver.set_page_load_timeout(30)
    driver.get(URL)
    # a marker that a reload would lose
    driver.execute_script("window.__dashMarker = 'kept';")

    JOB_NODES = "document.querySelectorAll('section.job tr.node').length"
    n = wait(driver, JOB_NODES + " >= 2 ? " + JOB_NODES + " : 0", 20)
    check(n == 2, "the page shows both nodes (rows: %s)" % n)
    check(driver.execute_script("return location.hash;") == "",
          "the credential left the address bar (fragment removed)")
    hosts = driver.execute_script(
        "return Array.from(document.querySelectorAll('tr.node td.host')).map(e => e.textContent);")
    print("     hosts: %r" % hosts)
    check(EVIL in hosts, "the HTML-injection host name is shown as text")
    check(driver.execute_script("return document.querySelectorAll('img').length;") == 0,
          "no element was made from the host name (no <img> in the page)")
    check(driver.execute_script("return window.__pwned === undefined;"),
          "no script of the host name ran")
    check(wait(driver, "document.querySelectorAll('tr.node .pill.s-running').length == 2", 10)
          is not None, "both nodes are shown running")
    hb = driver.execute_script(
        "return Array.from(document.querySelectorAll('tr.node td.hb')).map(e => e.textContent);")
    check(len(hb) == 2 and all(h != "\u2013" for h in hb), "heartbeat ages shown: %r" % hb)
    check(driver.execute_script("return document.querySelectorAll('tr.restart').length;") == 0,
          "no restart before the kill")

    # the job's log: opened, every rank's lines; then one rank's; a worker's HTML stays text
    driver.execute_script("document.querySelector('section.job details.logs summary').click();")
    LOG = "(function(){var p=document.querySelector('section.job details.logs pre.loglines');" \
          "return p ? p.textContent : '';})()"
    text = wait(driver, "(function(){var t=" + LOG + "; return t.indexOf('rank 0 attempt 0 ready')"
                " >= 0 && t.indexOf('rank 1 attempt 0 ready') >= 0 ? t : '';})()", 10)
    check(text is not None, "the log panel shows both ranks' lines")
    check(text is not None and '[rank1]: dash_worker rank 1 says <b id="logevil">bold</b>' in text,
          "a worker's HTML is shown as text in the log")
    check(driver.execute_script("return document.getElementById('logevil') === null && "
                                "document.querySelectorAll('img').length === 0;"),
          "no element was made from the worker's line")
    driver.execute_script("var s=document.querySelector('section.job details.logs select');"
                          "s.value='1'; s.dispatchEvent(new Event('change'));")
    one = wait(driver, "(function(){var l=Array.from(document.querySelectorAll("
               "'section.job details.logs .logline')).map(e => e.textContent);"
               "return l.length > 0 && l.every(x => x.indexOf('[rank1]: ') === 0) ? l : null;})()", 10)
    check(one is not None, "rank 1 chosen: only rank 1's lines (%r)" % (one[:3] if one else one))
    time.sleep(1.5)  # the page redraws every second: the panel stays open, rank 1 chosen
    check(driver.execute_script("var d=document.querySelector('section.job details.logs');"
                                "return d.open && d.querySelector('select').value === '1';"),
          "the log panel stays open on rank 1 across redraws")

    # a forced restart: SIGKILL to rank 1's worker
    with open(os.path.join(WORK, "pid.1.0")) as f:
        pid = int(f.read().strip())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    got = wait(driver, "(function(){var r=document.querySelector('tr.restart td.cause');"
               "return r && r.textContent.length > 0 ? r.textContent : '';})()", 10, 0.02)
    dt = time.monotonic() - t0
    print("     restart row after %.2f s: %r" % (dt, got))
    check(got is not None, "the restart appears in the page")
    check(got is not None and dt <= 2.0, "... within 2 s of the kill (%.2f s)" % dt)
    row = driver.execute_script(
        "var r=document.querySelector('tr.restart'); return r ? Array.from(r.cells)"
        ".map(e => e.textContent) : [];")
    print("     restart row: %r" % row)
    check(got is not None and "rank 1 was killed by signal 9" in got and "SIGKILL" in got,
          "its root cause names the kill")
    check(driver.execute_script("return document.getElementById('login').offsetParent === null;"),
          "the credential form is hidden once the credential was taken")
    check(len(row) > 4 and row[4] == "1", "... and rank 1")
    check(driver.execute_script("return window.__dashMarker;") == "kept",
          "the page was not reloaded")

    # a checkpoint (rank 0, after the restart)
    open(os.path.join(WORK, "ckpt.go"), "w").close()
    step = wait(driver, "(function(){var c=document.querySelector('tr.ckpt td.step');"
                "return c ? c.textContent : '';})()", 30)
    name = driver.execute_script(
        "var c=document.querySelector('tr.ckpt td.name'); return c ? c.textContent : '';")
    check(step == "120" and name == "ckpt_000120.pt",
          "the checkpoint appears with its step (%r, %r)" % (name, step))
    check(driver.execute_script("return window.__dashMarker;") == "kept",
          "still the same page (no reload)")
    # both nodes again, in the new round
    check(wait(driver, "document.querySelectorAll('tr.node .pill.s-running').length == 2", 15)
          is not None, "both nodes running again after the restart")

    shot = os.path.join(SHOTS, "dashboard.png")
    check(driver.save_screenshot(shot), "screenshot saved")
    print("SCREENSHOT " + shot)
    # a phone: one column, no page-wide horizontal scrolling (tables scroll in their box)
    driver.set_window_size(390, 844)
    time.sleep(1.5)
    over = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth;")
    check(over <= 1, "no horizontal page scroll at phone width (overflow %s px)" % over)
    phone = os.path.join(SHOTS, "dashboard-phone.png")
    driver.save_screenshot(phone)
    print("SCREENSHOT " + phone)

    logs = driver.get_log("browser")
    for entry in logs:
        print("     console: %s %s" % (entry.get("level"), entry.get("message")))
    check(not [e for e in logs if e.get("level") == "SEVERE"], "no error in the browser console")
finally:
    driver.quit()

sys.exit(1 if FAILED else 0)
