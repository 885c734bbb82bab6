"""A stand-in for a serving replica on a CPU test machine: serves /metrics in Switchyard's names, with the
number of waiting requests read from a file the test writes (its load), and /health.

    python fake_replica.py HOST PORT LOAD_FILE
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

host, port, load_file = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/metrics":
            waiting = int(load_file.read_text() or 0) if load_file.is_file() else 0
            body = (
                f'switchyard:num_requests_waiting{{model_name="pool"}} {waiting}\n'
                f'switchyard:num_requests_running{{model_name="pool"}} {min(waiting, 4)}\n'
                f'switchyard:kv_cache_usage_perc{{model_name="pool"}} {0.9 if waiting else 0.0}\n'
            ).encode()
        elif self.path == "/health":
            body = b"ok"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


ThreadingHTTPServer((host, port), Handler).serve_forever()
