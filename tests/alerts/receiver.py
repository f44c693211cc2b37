"""A real HTTP server in a thread that records the webhook deliveries it gets and answers each path as told."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """`answers[path]`: the statuses to answer in turn (the last one repeats); 200 when not set."""

    def __init__(self):
        self.received = []  # (path, JSON body) in arrival order
        self.answers = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.received.append((self.path, json.loads(raw), self.headers.get("Content-Type")))
                statuses = receiver.answers.get(self.path, [200])
                status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def bodies(self, path):
        return [body for p, body, _ in self.received if p == path]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
