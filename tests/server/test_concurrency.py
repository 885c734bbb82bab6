"""Many clients at once get independent, correct answers; clients that leave free their KV blocks."""

from __future__ import annotations

import asyncio
import socket
import time

import openai
from harness import MODEL, RunningServer, blocks_in_use, metric

GREEDY = {"temperature": 0, "max_tokens": 12, "extra_body": {"ignore_eos": True}}


def conversation(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Request {i}: " + "count the sheep " * (i % 5) + str(i * 7919)}]


def test_32_concurrent_streams_match_each_request_alone(server: RunningServer, client: openai.OpenAI) -> None:
    alone = [
        client.chat.completions.create(model=MODEL, messages=conversation(i), **GREEDY)
        .choices[0]
        .message.content
        for i in range(32)
    ]
    assert len(set(alone)) > 16, "prompts should give different answers"

    async def stream_one(api: openai.AsyncOpenAI, i: int) -> str:
        stream = await api.chat.completions.create(
            model=MODEL, messages=conversation(i), stream=True, **GREEDY
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def all_at_once() -> list[str]:
        async with server.async_client() as api:
            return await asyncio.gather(*(stream_one(api, i) for i in range(32)))

    assert asyncio.run(all_at_once()) == alone
    assert server.wait_for_free_blocks() == 0


def aborted(server: RunningServer) -> float:
    """Requests that finished by abort so far (the series appears with the first one)."""
    with server.http() as http:
        text = http.get("/metrics").text
    try:
        return metric(text, "switchyard:request_success_total", finished_reason="abort")
    except KeyError:
        return 0.0


def test_client_disconnecting_mid_stream_frees_its_blocks(
    server: RunningServer, client: openai.OpenAI
) -> None:
    aborted_before = aborted(server)
    stream = client.chat.completions.create(
        model=MODEL, messages=conversation(1), stream=True, max_tokens=200, extra_body={"ignore_eos": True}
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    assert blocks_in_use(server.llm_engine) > 0
    stream.close()
    assert server.wait_for_free_blocks() == 0
    assert not server.llm_engine.requests
    assert aborted(server) == aborted_before + 1  # freed by the abort, not by finishing


def test_client_disconnecting_from_a_non_streaming_request_frees_its_blocks(server: RunningServer) -> None:
    aborted_before = aborted(server)
    body = (
        b'{"model": "tiny", "max_tokens": 200, "ignore_eos": true, '
        b'"messages": [{"role": "user", "content": "a long one"}]}'
    )
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as raw:
        raw.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 5
        while not server.llm_engine.requests and time.monotonic() < deadline:
            time.sleep(0.005)
        assert server.llm_engine.requests, "the request never reached the engine"
    assert server.wait_for_free_blocks() == 0
    assert not server.llm_engine.requests
    assert aborted(server) == aborted_before + 1
