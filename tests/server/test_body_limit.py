"""`--max-request-bytes`: oversized bodies get 413 in the OpenAI error shape before anything parses them,
whether their length is declared or they arrive chunked; bodies under the cap, chunked ones included, are served."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from harness import MODEL, RunningServer, start_server

from switchyard.cli import DEFAULT_MAX_REQUEST_BYTES, build_parser
from switchyard.server.state import DEFAULT_MAX_REQUEST_BYTES as SETTINGS_DEFAULT
from switchyard.server.state import ServerSettings

LIMIT = 4096


@pytest.fixture(scope="module")
def small_limit(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir, max_request_bytes=LIMIT, api_key="k")
    yield running
    running.stop()


def chat_body(text: str) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 2}
    ).encode()


def chunks(body: bytes, size: int = 1000) -> Iterator[bytes]:
    """A body sent without Content-Length (Transfer-Encoding: chunked)."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def assert_too_large(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"
    assert f"{LIMIT:,} bytes" in error["message"] and "--max-request-bytes" in error["message"]


def test_the_openai_client_gets_413_for_a_body_over_the_limit(small_limit: RunningServer) -> None:
    client = small_limit.client(api_key="k")
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 5000}])
    assert raised.value.status_code == 413
    assert raised.value.body["code"] == "request_too_large"  # type: ignore[index]
    # The server is unaffected: a request under the limit is served right after.
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.choices[0].finish_reason in ("length", "stop")


def test_a_declared_length_over_the_limit_is_refused_unread(small_limit: RunningServer) -> None:
    headers = {"authorization": "Bearer k", "content-type": "application/json"}
    with small_limit.http() as http:
        response = http.post("/v1/completions", content=b"{" + b" " * LIMIT + b"}", headers=headers)
    assert_too_large(response)
    assert "4,098 bytes" in response.json()["error"]["message"]


def test_chunked_bodies_are_counted_as_they_arrive(small_limit: RunningServer) -> None:
    headers = {"authorization": "Bearer k", "content-type": "application/json"}
    with small_limit.http() as http:
        big = http.post("/v1/chat/completions", content=chunks(chat_body("y" * 6000)), headers=headers)
        small = http.post(
            "/v1/chat/completions", content=chunks(chat_body("hello " * 30), size=40), headers=headers
        )
    assert_too_large(big)
    assert "passed it" in big.json()["error"]["message"]
    assert small.status_code == 200, small.text  # a chunked body under the cap reaches the handler whole
    assert small.json()["usage"]["prompt_tokens"] > 30


def test_the_api_key_is_checked_before_the_size(small_limit: RunningServer) -> None:
    with small_limit.http() as http:
        response = http.post("/v1/completions", content=b"x" * (LIMIT + 1))
    assert response.status_code == 401


def test_cli_default_and_no_limit() -> None:
    assert (
        DEFAULT_MAX_REQUEST_BYTES
        == SETTINGS_DEFAULT
        == ServerSettings(served_model_names=("m",)).max_request_bytes
    )
    args = build_parser().parse_args(["serve", "--max-request-bytes", "0"])
    assert args.max_request_bytes == 0  # cmd_serve passes 0 on as None: no limit
    with pytest.raises(ValueError, match="max_request_bytes"):
        ServerSettings(served_model_names=("m",), max_request_bytes=-1)
