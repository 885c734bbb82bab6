"""Ctrl-C in `switchyard bench serve`, as an operator presses it: partial results kept and summarised, no
traceback, exit status 130. The endpoint is a scripted one whose later requests never finish."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FINISHING = 2
"""Requests the scripted endpoint completes; every later one streams a token and then hangs."""


class _Endpoint(BaseHTTPRequestHandler):
    served = 0
    hanging = 0
    lock = threading.Lock()
    release = threading.Event()

    def log_message(self, *args: object) -> None:
        """Quiet: the test reads the client's output, not the server's."""

    def do_GET(self) -> None:
        self._send(json.dumps({"data": [{"id": "scripted"}]}).encode(), "application/json")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.lock:
            type(self).served += 1
            finishes = self.served <= FINISHING
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b'data: {"choices": [{"text": "a"}]}\n\n')
        self.wfile.flush()
        if not finishes:
            with self.lock:
                type(self).hanging += 1
            self.release.wait(120)
        self.wfile.write(b"data: [DONE]\n\n")

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    _Endpoint.release.set()
    server.shutdown()


def test_ctrl_c_keeps_and_summarises_the_partial_run(endpoint: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "switchyard.cli", "bench", "serve", "--base-url", endpoint]
    command += ["--num-prompts", "5", "--warmup", "0", "--quiet", "--output-dir", str(out)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # A shell's background job ignores SIGINT; the command must see it as a terminal's Ctrl-C.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    jsonl = out / "requests.jsonl"
    deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
    while not (_Endpoint.hanging == 3 and jsonl.is_file() and len(jsonl.read_text().splitlines()) == 2):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "summary covers the 2 requests that finished; 3 in flight were cancelled" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["completed"], summary["failed"]) == (2, 0)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert sorted(r["error"] or "ok" for r in rows) == ["cancelled"] * 3 + ["ok"] * 2
    assert "interrupted" in (out / "report.md").read_text()
