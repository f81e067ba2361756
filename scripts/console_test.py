#!/usr/bin/env python3
"""The web console in headless Chromium, over W3C WebDriver (chromedriver), standard library only.

Run by scripts/check-console.sh against a running local cluster; it walks every view, acts
through the page (trigger, requeue), checks what a read-only token sees and that the API's
refusal is shown, saves a PNG of each view, and fails on any browser console error that
the step did not expect. Every wait is bounded; all traffic stays on loopback.
"""

import argparse
import base64
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zoneinfo

CHROME_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
]
WAIT = 30.0
# The browser's own zone, so that "local" and UTC differ on the page.
BROWSER_TZ = "America/New_York"
ZONED = re.compile(r" (UTC|[+-]\d\d:\d\d)$")
LONG_PATH = "x" * 240
SECRET_BITS = ["sekret-header", "hunter2", "qs-secret"]
# The tallest table row the layout checks allow (see Test.check_layout).
ROW_MAX_PX = 60


class Failure(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(method, url, body=None, token=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, dict(r.headers), (json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, dict(e.headers), raw


class Driver:
    """A chromedriver session: just the W3C commands this test needs."""

    def __init__(self, work, extra_args=()):
        self.port = free_port()
        self.log = open(os.path.join(work, "chromedriver.log"), "w")
        self.proc = subprocess.Popen(
            ["chromedriver", f"--port={self.port}", "--allowed-ips=127.0.0.1"],
            stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ, TZ=BROWSER_TZ))
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 15
        while True:
            try:
                if http("GET", f"{self.base}/status", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise Failure("chromedriver did not start")
            time.sleep(0.1)
        self.profile = tempfile.mkdtemp(prefix="ax-console-chrome.", dir=work)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": shutil.which("chromium") or "/usr/bin/chromium",
                                   "args": CHROME_ARGS + list(extra_args)
                                   + [f"--user-data-dir={self.profile}"]},
            "goog:loggingPrefs": {"browser": "ALL"},
            "timeouts": {"pageLoad": 20000, "script": 10000, "implicit": 0},
        }}}
        status, _, body = http("POST", f"{self.base}/session", caps, timeout=60)
        if status != 200:
            raise Failure(f"cannot start Chromium: {body}")
        self.sid = body["value"]["sessionId"]

    def cmd(self, method, path, body=None):
        status, _, resp = http(method, f"{self.base}/session/{self.sid}{path}", body, timeout=30)
        if status != 200:
            raise Failure(f"webdriver {method} {path}: {resp[:500] if isinstance(resp, bytes) else resp}")
        return resp["value"]

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def find(self, css):
        el = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(el.values()))

    def click(self, css):
        self.cmd("POST", f"/element/{self.find(css)}/click", {})

    def type(self, css, text):
        el = self.find(css)
        self.cmd("POST", f"/element/{el}/clear", {})
        self.cmd("POST", f"/element/{el}/value", {"text": text})

    def size(self, width, height):
        self.cmd("POST", "/window/rect", {"width": width, "height": height})

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.cmd("GET", "/screenshot")))

    def browser_log(self):
        return self.cmd("POST", "/se/log", {"type": "browser"})

    def close(self):
        try:
            http("DELETE", f"{self.base}/session/{self.sid}", timeout=10)
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


class Test:
    def __init__(self, args):
        self.args = args
        self.url = args.url
        self.tokens = {r: os.environ[f"AX_CONSOLE_{r.upper()}_TOKEN"] for r in ("admin", "operate", "read")}
        self.d = Driver(args.work)
        os.makedirs(args.screenshots, exist_ok=True)

    def wait(self, what, predicate, timeout=WAIT):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except Failure as e:
                last = e
            time.sleep(0.25)
        raise Failure(f"timed out after {timeout:.0f}s waiting for {what} (last: {last})")

    def text(self, css="body"):
        return self.d.js("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css)

    def wait_text(self, what, needle, css="body", timeout=WAIT):
        return self.wait(what, lambda: needle in self.text(css), timeout)

    def check_log(self, step, allowed=()):
        """Fails on a console error in the browser, except those this step expects."""
        for entry in self.d.browser_log():
            if entry.get("level") not in ("SEVERE", "ERROR"):
                continue
            msg = entry.get("message", "")
            if any(a in msg for a in allowed):
                continue
            raise Failure(f"browser console error during {step}: {msg}")

    def shot(self, name):
        self.d.screenshot(os.path.join(self.args.screenshots, f"console-{name}.png"))

    def check_zones(self, where, zones):
        """Every absolute time on the page ends with its zone, one of `zones`."""
        shown = self.d.js("return [...document.querySelectorAll('main small.abs')].map((e) => e.innerText.trim())")
        if not shown:
            raise Failure(f"no absolute time on {where}")
        bad = [t for t in shown if not ZONED.search(t) or not t.endswith(tuple(zones))]
        if bad:
            raise Failure(f"times on {where} without their zone {zones}: {bad[:5]}")
        return True

    def check_wraps(self, where):
        """A long error wraps: no table scrolls sideways at desktop width."""
        if LONG_PATH[:40] not in self.text("main"):
            raise Failure(f"the long error is not on {where}")
        wide = self.d.js("return [...document.querySelectorAll('main .scroll')]"
                         ".filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.scrollWidth - e.clientWidth)")
        if wide:
            raise Failure(f"a table on {where} scrolls sideways by {wide}px: a long error does not wrap")

    def check_layout(self, where):
        """Tables get the page's width and rows stay short; an error is cut, not squeezed.

        A row holds at most two lines: a relative time over its absolute one, or an error
        cut after two lines (its whole text in the title). Two lines of the page's 15 px text
        and 10 px of padding make about 47 px; a third line makes about 65 px, and a column
        squeezed to a few characters (the bug: rows 100-200 px tall) far more. So 60 px.
        """
        m = self.d.js("""
            const main = document.querySelector('main');
            const cs = getComputedStyle(main);
            const width = main.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
            const head = (t) => { const s = t.closest('section'); const h = s && s.querySelector('h2'); return h ? h.innerText : '?'; };
            return {
              width,
              tables: [...main.querySelectorAll('table')].map((t) => ({
                where: head(t), width: t.getBoundingClientRect().width,
                rows: [...t.rows].map((r) => [Math.round(r.getBoundingClientRect().height), r.innerText.slice(0, 80)]),
              })),
              errors: [...main.querySelectorAll('td .err')].map((e) => [Math.round(e.getBoundingClientRect().width), e.title === e.textContent, e.textContent.slice(0, 60)]),
            };""")
        if not m["tables"]:
            raise Failure(f"no table on {where}")
        problems = []
        for t in m["tables"]:
            if t["width"] < 0.7 * m["width"]:
                problems.append(f"table `{t['where']}` is {t['width']:.0f}px wide, under 70% of the page's {m['width']:.0f}px")
            tall = [r for r in t["rows"] if r[0] > ROW_MAX_PX]
            if tall:
                problems.append(f"rows of `{t['where']}` taller than {ROW_MAX_PX}px: {tall[:3]}")
        for width, titled, text in m["errors"]:
            if width < 160 or not titled:
                problems.append(f"an error in a table is {width}px wide (whole in its title: {titled}): {text}")
        if problems:
            raise Failure(f"the layout of {where}: " + "; ".join(problems))
        return True

    def check_chart_labels(self):
        """The charts' labels as drawn (font size times the SVG's scale) are legible."""
        sizes = self.d.js("return [...document.querySelectorAll('main svg.chart text')]"
                          ".map((t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)")
        if not sizes:
            raise Failure("no chart label on the overview")
        if min(sizes) < 11:
            raise Failure(f"chart labels drawn {min(sizes):.1f}px tall, under 11px")
        return True

    def ax(self, *argv, stdin=None, check=True):
        env = dict(os.environ, AX_ETCD_ENDPOINTS=self.args.etcd)
        r = subprocess.run([self.args.ax, *argv], input=stdin, capture_output=True, text=True, env=env, timeout=30)
        if not check:
            return r.returncode, r.stdout
        if r.returncode != 0:
            raise Failure(f"ax {' '.join(argv)}: {r.stdout} {r.stderr}")
        return r.stdout

    def login(self, role):
        self.d.type("#token-input", self.tokens[role])
        self.d.click("#token-form button[type=submit]")
        self.wait_text(f"the {role} token to be taken", f"console-{role}", "#whoami")

    def confirm(self, fields=None):
        self.wait("the confirmation dialog", lambda: self.d.js("return document.getElementById('confirm').open"))
        for name, value in (fields or {}).items():
            self.d.type(f"#confirm-field-{name}", value)
        self.d.click("#confirm-ok")

    def run(self):
        d = self.d
        d.size(1280, 1000)

        # The page, its headers and the token prompt.
        status, headers, _ = http("GET", f"{self.url}/ui/")
        csp = {k.lower(): v for k, v in headers.items()}.get("content-security-policy", "")
        if status != 200 or "script-src 'self'" not in csp or "unsafe-inline" in csp:
            raise Failure(f"/ui/ answered {status} with CSP `{csp}`")
        d.go(f"{self.url}/ui/#/overview")
        self.wait_text("the token prompt", "Sign in", "main")
        self.check_log("the token prompt", allowed=["status of 401"])

        if self.args.sharded:
            return self.run_sharded()

        # Overview as admin: a leader, both replicas.
        self.login("admin")
        self.wait("a leader on the overview", lambda: self.text("#leader") not in ("", "none"), 45)
        self.wait_text("both replicas", "console-2", "main")
        self.check_log("the overview")

        # Tasks registered through the CLI appear, in words; an invalid one stands out.
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "nightly-report", "namespace": "console", "handler": "log",
            "schedule": {"cron": "30 2 * * *", "timezone": "Asia/Shanghai"},
            "payload": {"message": "report"}, "labels": {"team": "data"}}))
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "heartbeat", "namespace": "console", "handler": "log",
            "schedule": {"every": "20s"}, "payload": {"message": "beat"}}))
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "flaky-hook", "namespace": "console", "handler": "http",
            "schedule": {"every": "1h"}, "timeout": "2s", "retry": {"max_retries": 0},
            "payload": {"order": 4242},
            "http": {"url": f"http://user:hunter2@127.0.0.1:9/hook/{LONG_PATH}?key=qs-secret",
                     "headers": {"Authorization": "Bearer sekret-header"}}}))
        etcdctl = shutil.which("etcdctl")
        if not etcdctl:
            raise Failure("etcdctl is missing; run scripts/setup.sh")
        subprocess.run([etcdctl, f"--endpoints={self.args.etcd}", "put", "/scheduler/tasks/console/broken",
                        '{"handler": "log", "schedule": {"every": "soon"}}'],
                       check=True, capture_output=True, timeout=15,
                       env=dict(os.environ, ETCDCTL_API="3"))
        d.go(f"{self.url}/ui/#/tasks?namespace=console")
        self.wait_text("the CLI's task in the table", "every day at 02:30 Asia/Shanghai", "main")
        self.wait_text("the invalid task's errors", "schedule.every", "tr.invalid.errors")
        self.wait("the heartbeat to fire", lambda: "succeeded" in self.text("main"), 45)
        # Every absolute time carries its zone: the browser's by default, UTC on request.
        self.check_zones("the task list", ("-05:00", "-04:00"))
        d.js("const s = document.getElementById('zone'); s.value = 'utc'; s.dispatchEvent(new Event('change'));")
        self.wait("the times in UTC", lambda: self.check_zones("the task list in UTC", (" UTC",)), 15)
        self.wait("the footer's 24-hour time", lambda: re.match(
            r"Updated \d\d:\d\d:\d\d UTC · ", self.text("#updated")))
        self.shot("tasks")
        d.type("input[name=search]", "night")
        d.click("form.filters button[type=submit]")
        self.wait("the search filter", lambda: "nightly-report" in self.text("main") and "heartbeat" not in self.text("tbody"))
        self.check_log("the task list")

        # A task page: next fires, trigger with a payload, the execution shows up.
        d.go(f"{self.url}/ui/#/task/console/nightly-report")
        self.wait("10 upcoming fires", lambda: self.d.js("return document.querySelectorAll('#upcoming li').length") == 10)
        self.wait_text("the next fires in the task's zone", "02:30:00 Asia/Shanghai", "#upcoming")
        self.check_zones("the task page", (" UTC",))
        d.click("[data-action=trigger]")
        self.confirm({"payload": '{"message": "from the console"}'})
        self.wait_text("the trigger's result", "Triggered console/nightly-report", "#notice")
        self.wait("the triggered execution", lambda: "succeeded" in self.text("main"), 45)
        if "\nnull\n" in f"\n{self.text('main')}\n":
            raise Failure("the task page shows a stray `null`")
        self.shot("task")
        self.check_log("the task page")
        # Its page says who ran it by hand, and with what payload.
        d.click("main a[data-execution]")
        self.wait_text("how the run started", "a run now by console-admin", "#origin")
        self.wait_text("the run's own payload", '"from the console"', "main")
        self.wait_text("the story's first line", "asked: a run now by console-admin", "#story")
        self.check_log("the manual run's page")

        # A sharded task and the task after it: the shards and the run show on their pages.
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "sharded", "namespace": "console", "handler": "log",
            "schedule": {"every": "1h"}, "fanout": {"shards": 3}}))
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "after-shards", "namespace": "console", "handler": "log",
            "depends_on": [{"task": "sharded"}]}))
        self.ax("task", "trigger", "console/sharded")
        d.go(f"{self.url}/ui/#/task/console/sharded")
        self.wait_text("the shards of the fire", "shard 3/3", "main", 45)
        d.go(f"{self.url}/ui/#/task/console/after-shards")
        self.wait_text("the task's parent", "console/sharded (on success)", "#depends-on")
        self.wait_text("the step of the run", "run ", "main", 45)
        self.check_log("the sharded task and its chain")

        # A broadcast task: one execution per live worker, grouped under their fire.
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "everywhere", "namespace": "console", "handler": "log",
            "schedule": {"every": "1h"}, "fanout": {"broadcast": True}}))
        self.ax("task", "trigger", "console/everywhere")
        d.go(f"{self.url}/ui/#/task/console/everywhere")
        self.wait_text("the fire's row", "broadcast to 2 workers", "main", 45)
        self.wait_text("each worker's execution", "on console-1", "main", 45)
        self.wait_text("each worker's execution", "on console-2", "main", 45)
        self.check_log("the broadcast task")

        # Execution ids: UUID v7 ids of one minute share their start, so each shows its end,
        # the whole id in its title, and links to the execution's page.
        d.go(f"{self.url}/ui/#/task/console/heartbeat")
        self.wait("two heartbeat executions", lambda: self.d.js(
            "return document.querySelectorAll('#view a[data-execution]').length") >= 2, 45)
        shown = d.js("return [...document.querySelectorAll('#view a[data-execution]')]"
                     ".map((a) => [a.dataset.execution, a.innerText, a.title, a.getAttribute('href')])")
        if len({t for _, t, _, _ in shown}) != len({i for i, _, _, _ in shown}):
            raise Failure(f"different executions look the same: {shown}")
        for full, text, title, href in shown:
            if full[-8:] not in text or full not in title or href != f"#/execution/{full}":
                raise Failure(f"execution {full} shown as `{text}` (title `{title}`, link `{href}`)")
        first, second = shown[0][0], shown[1][0]
        d.click("#view a[data-execution]")
        self.wait("the execution's page", lambda: self.text("#execution-id") == first)
        self.wait_text("its story", "attempt 1 started on console-", "#story")
        self.wait_text("its end", "attempt 1 succeeded", "#story")
        self.wait_text("the worker that ran it", "console-", "#workers")
        self.wait_text("its task", "console/heartbeat", "main")
        if "\nnull\n" in f"\n{self.text('main')}\n":
            raise Failure("the execution page shows a stray `null`")
        self.shot("execution")
        # The search box finds an execution by the end of its id, or says why it cannot.
        d.type("#find-input", second[-8:])
        d.click("#find-form button[type=submit]")
        self.wait("the execution found by its end", lambda: self.d.js("return location.hash") == f"#/execution/{second}")
        self.wait("its page", lambda: self.text("#execution-id") == second)
        d.type("#find-input", "ffffffffffff")
        d.click("#find-form button[type=submit]")
        self.wait_text("no match", "No execution id starts or ends with", "#candidates")
        d.type("#find-input", second[-4:])
        d.click("#find-form button[type=submit]")
        self.wait_text("a fragment too short", "at least 6 characters", "#notice")
        self.check_log("the execution page", allowed=["status of 400"])

        # Secrets stay masked on the page.
        d.go(f"{self.url}/ui/#/task/console/flaky-hook")
        self.wait_text("the http task's spec", "***", "pre.spec")
        page = self.text("body")
        for bit in SECRET_BITS:
            if bit in page:
                raise Failure(f"the task page shows the secret `{bit}`")

        # A failing run reaches the dead letters and is requeued from the page.
        d.click("[data-action=trigger]")
        self.confirm()
        self.wait_text("the failing trigger's result", "Triggered console/flaky-hook", "#notice")
        d.go(f"{self.url}/ui/#/dlq")
        self.wait_text("the dead letter", "console/flaky-hook", "main", 45)
        self.wait_text("its errors per attempt", "#1 failed: POST", "main")
        d.js("document.querySelector('details.payload').open = true")
        self.wait_text("its payload", '"order": 4242', "details.payload")
        self.check_wraps("the dead letters")
        self.shot("dlq")
        d.click("#view a[data-execution]")
        self.wait_text("the dead letter's story", "dead-lettered", "#story")
        self.wait_text("its error", "POST", "#error")
        self.check_wraps("the dead letter's page")
        d.go(f"{self.url}/ui/#/dlq")
        self.wait_text("the dead letter again", "console/flaky-hook", "main", 45)
        d.click("[data-action=requeue]")
        self.confirm()
        self.wait_text("the requeue's result", "Requeued 1 dead letter", "#notice")
        self.check_log("the dead letters")

        # The audit log names who did it, and a change in words.
        d.go(f"{self.url}/ui/#/audit?actor=console-admin")
        self.wait_text("the trigger in the audit log", "trigger", "main")
        self.wait_text("the requeue in the audit log", "console-admin", "main")
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "heartbeat", "namespace": "console", "handler": "log", "version": 2,
            "schedule": {"every": "30s"}, "payload": {"message": "beat"}}))
        d.go(f"{self.url}/ui/#/audit?action=put")
        self.wait_text("the change in words", "schedule.every: 20s → 30s", "main")
        self.wait_text("a creation folded away", "created with this spec", "main")
        page = self.text("main")
        if any(raw in page for raw in ('{"changed"', '{"created"', '"from"')):
            raise Failure(f"the audit detail is shown as raw JSON:\n{page[:2000]}")
        self.shot("audit")
        self.check_log("the audit log")

        # The overview counts the fires and failures of the last hour, and says where each
        # replica runs and whether it is heard from.
        d.go(f"{self.url}/ui/#/overview")
        self.wait_text("each replica's pid", " · pid ", "main")
        self.wait_text("each replica's state", "live", "main")
        self.wait("fires counted", lambda: int(self.text("#fires-count") or 0) >= 2)
        self.wait("failures counted", lambda: int(self.text("#failures-count") or 0) >= 1)
        self.wait("the lateness chart", lambda: self.d.js("return document.querySelectorAll('#lateness-chart svg.chart polyline').length") == 2)
        self.wait("the throughput chart", lambda: self.d.js("return document.querySelectorAll('#throughput-chart svg.chart polyline').length") == 2)
        if not self.d.js("const t = document.getElementById('term'); return !!t && t.title.includes('election')"):
            raise Failure("the leader's term is not explained")
        self.wait_text("the clock line explained", "refuses to lead", "#clock")
        self.shot("overview")
        self.check_log("the overview with history")

        # A queue's page: paused from the page, what arrives waits in the list, resumed it runs.
        d.go(f"{self.url}/ui/#/overview")
        self.wait("the queue's link", lambda: self.d.js("return !!document.querySelector('a[data-queue=default]')"))
        d.click("a[data-queue=default]")
        self.wait_text("the queue's page", "Queue default", "h1")
        # The title is there at once; the buttons come with the page's first answer.
        self.wait("the pause button", lambda: self.d.js("return !!document.querySelector('[data-action=pause-queue]')"))
        if self.text("h1") != "Queue default":
            raise Failure(f"the queue's title reads `{self.text('h1')}`, not `Queue default`")
        d.click("[data-action=pause-queue]")
        self.confirm()
        self.wait_text("the pause's result", "Paused queue default", "#notice")
        self.wait_text("the paused badge", "paused", "h1")
        self.ax("task", "trigger", "console/heartbeat")
        self.wait_text("the waiting execution", "console/heartbeat", "#queue-contents", 30)
        self.wait_text("its count", "Waiting (1)", "#queue-contents", 30)
        self.shot("queue")
        d.click("[data-action=resume-queue]")
        self.confirm()
        self.wait_text("the resume's result", "Resumed queue default", "#notice")
        self.wait_text("the queue drained", "Waiting (0)", "#queue-contents", 30)
        self.check_log("the queue page")

        # A task written on the page, checked as `ax task put` checks it, then registered
        # and edited.
        d.go(f"{self.url}/ui/#/tasks")
        self.wait("the new-task link", lambda: self.d.js("return !!document.getElementById('new-task')"))
        d.click("#new-task")
        self.wait("the editor's template", lambda: '"my-task"' in self.d.js("return document.getElementById('spec-editor').value"))
        bad = {"namespace": "console", "id": "written", "handler": "log", "schedule": {"every": "soon"}, "priorty": 3}
        d.js("document.getElementById('spec-editor').value = arguments[0]", json.dumps(bad))
        d.click("[data-action=check]")
        self.wait_text("every problem with its path", "schedule.every", "#editor-errors")
        self.wait_text("the unknown field named", "priorty", "#editor-errors")
        good = {"namespace": "console", "id": "written", "handler": "log",
                "schedule": {"cron": "0 30 9 * * *", "timezone": "America/New_York"}}
        d.js("document.getElementById('spec-editor').value = arguments[0]", json.dumps(good, indent=2))
        d.click("[data-action=check]")
        self.wait_text("the dry run's next fires", "would fire next", "#editor-result")
        self.wait_text("the fires in the task's zone", "09:30:00 America/New_York", "#editor-fires")
        if self.ax("task", "get", "console/written", "-o", "json", check=False)[0] == 0:
            raise Failure("a dry run registered the task")
        self.shot("editor")
        d.click("[data-action=register]")
        self.wait("the registered task's page", lambda: self.d.js("return location.hash") == "#/task/console/written")
        self.wait_text("its schedule in words", "America/New_York", "main")
        d.click("#edit-task")
        self.wait("the spec to edit, version raised", lambda: '"version": 2' in self.d.js("return document.getElementById('spec-editor').value"))
        edited = json.loads(d.js("return document.getElementById('spec-editor').value"))
        edited["schedule"] = {"every": "45s"}
        d.js("document.getElementById('spec-editor').value = arguments[0]", json.dumps(edited))
        d.click("[data-action=register]")
        self.wait("back on the task's page", lambda: self.d.js("return location.hash") == "#/task/console/written")
        self.wait_text("the edited schedule", "every 45s", "main")
        self.check_log("the task editor", allowed=["status of 400", "status of 404"])

        # A task whose breaker opened shows THROTTLED with why, not SCHEDULED.
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "failing", "namespace": "throttle", "handler": "http",
            "schedule": {"every": "1s"}, "overlap": "allow", "timeout": "1s", "retry": {"max_retries": 0},
            "http": {"url": "http://127.0.0.1:9/down"}}))
        d.go(f"{self.url}/ui/#/tasks?namespace=throttle")
        self.wait_text("the throttled badge", "THROTTLED", "main", 60)
        d.go(f"{self.url}/ui/#/task/throttle/failing")
        self.wait_text("why it is throttled", "1 fire in 10 is dispatched", "#throttled")
        self.shot("task-throttled")
        # Away from its page first: a refresh of a deleted task's page answers 404.
        d.go(f"{self.url}/ui/#/tasks?namespace=throttle")
        self.wait_text("the task list again", "throttle/failing", "main")
        self.ax("task", "delete", "throttle/failing")
        self.check_log("the throttled task")

        self.check_layouts()

        # A phone-sized screen: nothing wider than the screen but the tables' own scrollers.
        d.size(390, 844)
        d.go(f"{self.url}/ui/#/overview")
        self.wait("the overview on a phone", lambda: int(self.text("#fires-count") or 0) >= 2)
        overflow = d.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        if overflow > 1:
            raise Failure(f"the overview is {overflow}px wider than a phone screen")
        self.shot("overview-phone")
        d.size(1280, 1000)

        # Keyboard: the nav links are reachable and followed with Enter.
        d.js("document.querySelector('[data-nav=dlq]').focus()")
        self.d.cmd("POST", "/actions", {"actions": [{"type": "key", "id": "kb", "actions": [
            {"type": "keyDown", "value": "\ue007"}, {"type": "keyUp", "value": "\ue007"}]}]})
        self.wait("Enter on a focused nav link", lambda: self.d.js("return location.hash") == "#/dlq")

        # A read-only token sees no action buttons.
        self.d.click("#token-clear")
        self.wait_text("the token prompt", "Sign in", "main")
        self.login("read")
        for view in ("task/console/nightly-report", "dlq", "tasks"):
            d.go(f"{self.url}/ui/#/{view}")
            self.wait(f"#/{view} as read", lambda: self.text("main").strip() and "Sign in" not in self.text("main"))
            time.sleep(0.5)
            buttons = d.js("return document.querySelectorAll('[data-action]').length")
            if buttons:
                raise Failure(f"a read token sees {buttons} action button(s) on #/{view}")
        self.check_log("the read-only views", allowed=["status of 401"])

        # An action the token's role does not allow is refused, and the refusal is shown:
        # the page was loaded as operate, then the tab's token was swapped for a read one.
        self.d.click("#token-clear")
        self.wait_text("the token prompt", "Sign in", "main")
        self.login("operate")
        d.go(f"{self.url}/ui/#/task/console/nightly-report")
        self.wait("the trigger button", lambda: self.d.js("return !!document.querySelector('[data-action=trigger]')"))
        d.js("sessionStorage.setItem('ax.token', arguments[0])", self.tokens["read"])
        d.click("[data-action=trigger]")
        self.confirm()
        self.wait_text("the API's refusal", "403", "#notice")
        self.wait_text("the refusal's reason", "needs the `operate` role", "#notice")
        self.check_log("the refused action", allowed=["status of 403", "status of 401"])


    def check_layouts(self):
        """The overview, a task, an execution and a queue at 1280 and 1920 px, times local."""
        d = self.d
        d.js("const s = document.getElementById('zone'); s.value = 'local'; s.dispatchEvent(new Event('change'));")
        status, _, page = http("GET", f"{self.url}/api/v1/executions?task=console/flaky-hook&limit=1",
                               token=self.tokens["admin"])
        if status != 200 or not page["items"]:
            raise Failure(f"no execution of console/flaky-hook: {status} {page}")
        failed = page["items"][0]["execution_id"]
        for width in (1280, 1920):
            d.size(width, 1000)
            d.go(f"{self.url}/ui/#/overview")
            self.wait("the overview's charts", lambda: self.d.js(
                "return document.querySelectorAll('main svg.chart polyline').length") == 4)
            self.wait_text("the recent failures", "console/flaky-hook", "main")
            self.wait(f"the overview's layout at {width}px", lambda: self.check_layout(f"the overview at {width}px"), 10)
            self.check_chart_labels()
            d.go(f"{self.url}/ui/#/task/console/flaky-hook")
            self.wait_text("the task's failed executions", LONG_PATH[:40], "main table")
            self.wait(f"the task page's layout at {width}px", lambda: self.check_layout(f"the task page at {width}px"), 10)
            d.go(f"{self.url}/ui/#/execution/{failed}")
            self.wait_text("the execution's attempts", LONG_PATH[:40], "main table")
            self.wait(f"the execution page's layout at {width}px", lambda: self.check_layout(f"the execution page at {width}px"), 10)
        # A queue with a waiting execution: paused, then a trigger.
        self.ax("queue", "pause", "default")
        self.ax("task", "trigger", "console/heartbeat")
        try:
            for width in (1920, 1280):
                d.size(width, 1000)
                d.go(f"{self.url}/ui/#/queue/default")
                self.wait_text("the waiting execution", "console/heartbeat", "#queue-contents table", 30)
                self.wait(f"the queue page's layout at {width}px", lambda: self.check_layout(f"the queue page at {width}px"), 10)
        finally:
            self.ax("queue", "resume", "default")
        # A cron the words do not cover is shown as written, as code; an `at` in the page's zone.
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "odd-cron", "namespace": "console", "handler": "log",
            "schedule": {"cron": "15 30 2 * * *", "timezone": "Asia/Shanghai"}}))
        at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(days=30)
        self.ax("task", "put", "-", stdin=json.dumps({
            "id": "launch", "namespace": "console", "handler": "log",
            "schedule": {"at": at.isoformat().replace("+00:00", "Z")}}))
        local = at.astimezone(zoneinfo.ZoneInfo(BROWSER_TZ))
        offset = local.strftime("%z")
        at_text = f"once at {local:%Y-%m-%d %H:%M:%S} {offset[:3]}:{offset[3:]}"
        d.go(f"{self.url}/ui/#/task/console/launch")
        self.wait(f"the `at` schedule as `{at_text}`", lambda: self.text("#schedule") == at_text)
        cron_text = "cron 15 30 2 * * * Asia/Shanghai"
        d.go(f"{self.url}/ui/#/task/console/odd-cron")
        self.wait(f"the cron schedule as `{cron_text}`", lambda: self.text("#schedule") == cron_text)
        if self.text("#schedule code") != "15 30 2 * * *":
            raise Failure(f"the cron expression is not shown as code: `{self.text('#schedule code')}`")
        d.go(f"{self.url}/ui/#/tasks?namespace=console")
        row = "return [...document.querySelectorAll('main tr')].filter((r) => r.querySelector(`a[href='#/task/console/${arguments[0]}']`)).map((r) => r.cells[1].innerText).join()"
        self.wait(f"the `at` schedule in the list as `{at_text}`", lambda: d.js(row, "launch") == at_text)
        self.wait(f"the cron schedule in the list as `{cron_text}`", lambda: d.js(row, "odd-cron") == cron_text)

        self.check_log("the layouts")

    def run_sharded(self):
        """The overview of replicas sharing shards: the shard map instead of a leader."""
        self.login("admin")
        self.wait("every shard owned", lambda: self.text("#shards") == "4 of 4 owned", 45)
        self.wait_text("both replicas", "console-2", "main")
        text = self.text("main")
        if "No leader" in text or "shards have no owner" in text:
            raise Failure(f"a sharded cluster shown as not scheduling:\n{text[:2000]}")
        if text.count(" shards") < 2:
            raise Failure(f"no replica shown with its shards:\n{text[:2000]}")
        self.shot("overview-sharded")
        self.check_log("the sharded overview")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--ax", required=True)
    p.add_argument("--etcd", required=True)
    p.add_argument("--screenshots", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--sharded", action="store_true",
                   help="the replicas share 4 shards: check the overview's shard map only")
    args = p.parse_args()
    for tool in ("chromium", "chromedriver"):
        if not shutil.which(tool):
            print(f"console: {tool} is missing; run scripts/setup.sh", file=sys.stderr)
            return 1
    started = time.time()
    test = None
    try:
        test = Test(args)
        test.run()
    except (Failure, OSError, subprocess.SubprocessError, KeyError) as e:
        if test:
            try:
                test.shot("failure")
                print(f"console: page at failure:\n{test.text('body')[:3000]}", file=sys.stderr)
            except Exception:  # noqa: BLE001 - the report must not hide the failure
                pass
        print(f"console: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if test:
            test.d.close()
    print(f"console: all checks passed in {time.time() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
