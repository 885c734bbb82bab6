"""An OpenAI-style upstream that answers at once, for measuring what a gateway in front of it costs.

A raw asyncio HTTP/1.1 server (keep-alive, chunked streams), so its own CPU stays small and out of the
gateway's process: `POST /v1/chat/completions` and `/v1/completions` answer `max_tokens` content events as
separate writes --gap-ms apart (one per token, as a Switchyard replica sends them), a finish event, the usage chunk when
`stream_options.include_usage` asks for it, then `data: [DONE]`; not streamed, one JSON body. `GET /health`
answers 200; anything else 404.

Usage: python benchmarks/instant_upstream.py --port PORT [--gap-ms MS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

_OK = b"HTTP/1.1 200 OK\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _usage(tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens}


async def _answer(writer: asyncio.StreamWriter, path: str, body: dict[str, Any], gap: float) -> None:
    tokens = int(body.get("max_tokens") or 16)
    chat = path.endswith("/chat/completions")
    kind = "chat.completion" if chat else "text_completion"
    base = {"id": "cmpl-instant", "created": 0, "model": body.get("model", "bench")}
    if not body.get("stream"):
        choice = {"index": 0, "finish_reason": "length"}
        choice |= (
            {"message": {"role": "assistant", "content": "x" * tokens}} if chat else {"text": "x" * tokens}
        )
        data = json.dumps({**base, "object": kind, "choices": [choice], "usage": _usage(tokens)}).encode()
        head = b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(data)
        writer.write(_OK + head + data)
        await writer.drain()
        return
    writer.write(_OK + b"content-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    chunk_kind = {"object": "chat.completion.chunk" if chat else "text_completion"}
    for _ in range(tokens):
        delta = {"delta": {"content": "x"}} if chat else {"text": "x"}
        writer.write(_chunk(_event({**base, **chunk_kind, "choices": [{"index": 0, **delta}]})))
        await writer.drain()
        await asyncio.sleep(gap)  # each event its own read at the gateway, as when a model generates them
    finish = {"delta": {}, "finish_reason": "length"} if chat else {"text": "", "finish_reason": "length"}
    events = _event({**base, **chunk_kind, "choices": [{"index": 0, **finish}]})
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        events += _event({**base, **chunk_kind, "choices": [], "usage": _usage(tokens)})
    writer.write(_chunk(events) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gap: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines[1:] if line)
            }
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "GET" and path == "/health":
                writer.write(_OK + b"content-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
                await writer.drain()
            elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
                await _answer(writer, path, json.loads(raw), gap)
            else:
                writer.write(_NOT_FOUND)
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _main(port: int, gap: float) -> None:
    server = await asyncio.start_server(lambda r, w: _serve(r, w, gap), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--gap-ms", type=float, default=2.0, help="milliseconds between a stream's events (2)"
    )
    args = parser.parse_args()
    asyncio.run(_main(args.port, args.gap_ms / 1000))
