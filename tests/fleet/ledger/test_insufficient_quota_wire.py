"""The out-of-credit answer as the official OpenAI client reads it: RateLimitError with OpenAI's
`insufficient_quota` type and code, and no retries (waiting does not bring credit back)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from switchyard.fleet.errors import InsufficientQuotaError, describe


class OutOfCredit(BaseHTTPRequestHandler):
    """Answers every request the way the gateway's error mapping answers a refused reservation."""

    requests = 0

    def do_POST(self) -> None:
        type(self).requests += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        info = describe(InsufficientQuotaError("acme", "0.014", "0.012"))
        body = json.dumps(info.body()).encode()
        self.send_response(info.status)
        for name, value in {**info.headers, "Content-Type": "application/json"}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OutOfCredit)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_the_openai_client_raises_insufficient_quota_without_retrying(server_url: str) -> None:
    OutOfCredit.requests = 0
    client = openai.OpenAI(base_url=server_url, api_key="k", max_retries=3)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 429
    assert (refused.value.code, refused.value.type) == ("insufficient_quota", "insufficient_quota")
    assert "exceeded your current quota" in refused.value.message
    assert OutOfCredit.requests == 1
