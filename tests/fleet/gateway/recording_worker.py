"""A real HTTP worker on loopback that records the bodies it receives: what a replica sees of a request.

It answers chat completions like a server would (a fixed answer with usage), and a streamed one with
`cut_after` chunks and then a dropped connection mid-body, as a crashed replica would; or, given a
`first_token` event, a whole stream whose role chunk goes out at once and whose tokens wait for the event, as a
server's do for the prefill. /health and /metrics answer so the gateway's health checks find it healthy.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT_TOKENS = 11
OUTPUT_TOKENS = 3


class RecordingWorker:
    def __init__(
        self,
        cut_after: int = 4,
        gate: threading.Event | None = None,
        first_token: threading.Event | None = None,
    ) -> None:
        """`gate`: when given, each request is held after it was recorded until the gate is set."""
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.cut_after = cut_after
        worker = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                return

            def do_GET(self) -> None:
                self._reply(200, b"{}" if self.path == "/health" else b"", "text/plain")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                worker.bodies.append(body)
                worker.headers.append({name.lower(): value for name, value in self.headers.items()})
                if gate is not None:
                    gate.wait(timeout=60)
                if body.get("stream") and first_token is not None:
                    self._whole_stream(first_token)
                    return
                if body.get("stream"):
                    self._cut_stream()
                    return
                answer = {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "a b c"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": PROMPT_TOKENS,
                        "completion_tokens": OUTPUT_TOKENS,
                        "total_tokens": PROMPT_TOKENS + OUTPUT_TOKENS,
                    },
                }
                self._reply(200, json.dumps(answer).encode(), "application/json")

            def _reply(self, status: int, payload: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _start_stream(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()

            def _send_event(self, data: str) -> None:
                event = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()

            def _send_delta(self, delta: dict[str, str]) -> None:
                chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
                self._send_event(json.dumps(chunk, separators=(",", ":")))

            def _whole_stream(self, first_token: threading.Event) -> None:
                self._start_stream()
                self._send_delta({"role": "assistant", "content": ""})
                first_token.wait(timeout=60)
                for index in range(OUTPUT_TOKENS):
                    self._send_delta({"content": f"t{index}"})
                self._send_event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")

            def _cut_stream(self) -> None:
                self._start_stream()
                for index in range(worker.cut_after):
                    self._send_delta({"content": f"t{index}"})
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)  # mid-body: no final chunk, no [DONE]

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
