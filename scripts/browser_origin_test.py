#!/usr/bin/env python3
"""What a web page of another origin can do to a replica on loopback, in headless Chromium.

Run by scripts/check-browser-origin.sh against one running replica (with a token, or opened
with `http.insecure_open_api`). A page served from another loopback origin tries a
`text/plain` fetch POST, a bodyless POST, a CORS read, a preflighted JSON POST and two form
posts; then a page under a name rebound to 127.0.0.1 (DNS rebinding, simulated with
Chromium's host resolver rules) reads the API as its own origin. Passes when etcd holds the
same task specs and pauses as before, and no page read an answer; a write through the API
with the admin's means afterwards shows the snapshot would have seen a change. Standard
library only, with the WebDriver client of console_test.py.
"""

import argparse
import base64
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from console_test import Driver, Failure, http  # noqa: E402

REBOUND = "rebound.test"


def snapshot(etcd, prefix):
    """(key, mod_revision) of every task spec and namespace pause under `prefix`."""
    out = {}
    for part in ("tasks", "paused"):
        raw = subprocess.run(
            ["etcdctl", f"--endpoints={etcd}", "get", "--prefix", f"{prefix}/{part}/", "-w", "json"],
            check=True, capture_output=True, text=True, timeout=10).stdout
        for kv in json.loads(raw).get("kvs", []):
            out[base64.b64decode(kv["key"]).decode()] = kv["mod_revision"]
    return out


def wait_results(d, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = d.js("return window.results;")
        if r:
            return r
        time.sleep(0.2)
    raise Failure("the attacker page did not finish")


def check_cross_origin(d, args):
    d.go(f"{args.attacker}/browser_origin_attack.html")
    d.js("attack(arguments[0]); return true;", args.url)
    results = wait_results(d)
    print(f"browser-origin: page results: {json.dumps(results)}")
    for name in ("cors_read", "json_post"):
        if not str(results.get(name, "")).startswith("error:"):
            raise Failure(f"the foreign page read an answer ({name}): {results[name]}")


def check_rebound(d, args):
    port = args.url.rsplit(":", 1)[1]
    d.go(f"http://{REBOUND}:{port}/healthz")
    script = """
        const done = arguments[arguments.length - 1];
        (async () => {
          const out = {};
          for (const [name, init] of [
              ['read', {}],
              ['write', {method: 'POST', headers: {'Content-Type': 'application/json'},
                         body: JSON.stringify({id: 'evil-rebound', schedule: {every: '1m'},
                                               handler: 'log', payload: {}})}]]) {
            try {
              const url = name === 'read' ? '/api/v1/tasks?show_secrets=true' : '/api/v1/tasks';
              const res = await fetch(url, init);
              out[name] = {status: res.status, text: await res.text()};
            } catch (e) { out[name] = {status: 0, text: String(e)}; }
          }
          done(out);
        })();
    """
    out = d.cmd("POST", "/execute/async", {"script": script, "args": []})
    print(f"browser-origin: rebound page results: {json.dumps(out)}")
    for name, answer in out.items():
        if answer["status"] in (200, 201) or "victim" in answer["text"]:
            raise Failure(f"the rebound page got through ({name}): {answer}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True, help="the replica, http://127.0.0.1:PORT")
    p.add_argument("--attacker", required=True, help="the attacker's origin")
    p.add_argument("--etcd", required=True)
    p.add_argument("--prefix", default="/scheduler")
    p.add_argument("--token", default="", help="the admin token, for the control write")
    p.add_argument("--work", required=True)
    args = p.parse_args()
    before = snapshot(args.etcd, args.prefix)
    if not any(k.endswith("/tasks/default/victim") for k in before):
        raise Failure(f"no victim task in etcd: {before}")
    d = Driver(args.work, [f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"])
    try:
        check_cross_origin(d, args)
        check_rebound(d, args)
    finally:
        d.close()
    time.sleep(1)
    after = snapshot(args.etcd, args.prefix)
    if after != before:
        raise Failure(f"etcd changed: before {before}, after {after}")
    # The control: a pause by a caller with the admin's means is seen.
    status, _, body = http("POST", f"{args.url}/api/v1/namespaces/default/pause", token=args.token)
    if status != 204:
        raise Failure(f"the control pause answered {status}: {body}")
    if snapshot(args.etcd, args.prefix) == after:
        raise Failure("the control pause left etcd as it was: the snapshot sees nothing")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (Failure, OSError, subprocess.SubprocessError, KeyError) as e:
        print(f"browser-origin: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
