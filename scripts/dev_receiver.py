"""A stand-in for the outside services the example http tasks call, on loopback.

scripts/dev.sh points every example http task here instead of its real address, so a local
cluster calls nothing outside the machine and its demo executions succeed. Answers 200 with a
small JSON body to every request and logs one line per call (method, path, body size).
    python3 scripts/dev_receiver.py PORT
"""

import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        # Bounded: a demo payload is small, and nothing here needs more than its size.
        self.rfile.read(min(length, 1 << 20))
        body = json.dumps({"ok": True, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        print(f"{self.command} {self.path} {length} bytes", flush=True)

    do_POST = do_PUT = do_GET = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1])
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
