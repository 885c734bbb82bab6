"""Server-sent events and client-disconnect handling shared by the chat, completions and Responses endpoints.

Endpoints produce typed bodies (pydantic chunk and event models) and this is the one place that writes them
out: as `data: <json>` messages ending with `data: [DONE]` (chat and completions), or as named events,
`event: <type>` then `data: <json>`, ending with the last event (the Responses API). An error after the 200
headers went out cannot change the status any more, so it is sent as an OpenAI error event,
`data: {"error": {...}}` (named `error` in a Responses stream), on which the OpenAI client raises APIError with
the message. A client that goes away cancels the generator feeding the response, and leaving the streams'
`async with` aborts their engine requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar

from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from switchyard.engine.async_engine import RequestStream
from switchyard.engine.sequence import RequestOutput
from switchyard.server.errors import describe

T = TypeVar("T")

"""nginx's status for a request whose client left before the answer; nobody receives it, logs show it."""

_DONE = "data: [DONE]\n\n"


class NamedEvent(Protocol):
    """A stream event that names its own type (the Responses API's events)."""

    @property
    def type(self) -> str: ...

    def model_dump_json(self) -> str: ...


def event_stream_response(
    chunks: AsyncIterator[BaseModel], streams: list[RequestStream]
) -> StreamingResponse:
    """A text/event-stream response of `data: <chunk>` messages, an error event if `chunks` raise, then [DONE].

    `streams` are the engine requests feeding `chunks`; they are aborted when the response ends for any
    reason, even one that never started iterating `chunks` (a client gone before the first byte).
    """
    return _event_stream(_data_messages(chunks), streams)


def named_event_stream_response(
    events: AsyncIterator[NamedEvent], streams: list[RequestStream]
) -> StreamingResponse:
    """A text/event-stream response of `event: <type>` + `data: <event>` messages, as the Responses API sends
    them: no [DONE], an error is an `event: error`. `streams` are aborted as in `event_stream_response`."""
    return _event_stream(_named_messages(events), streams)


def _event_stream(messages: AsyncIterator[str], streams: list[RequestStream]) -> StreamingResponse:
    return _EventStreamResponse(
        messages,
        streams,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class _EventStreamResponse(StreamingResponse):
    def __init__(self, content: AsyncIterator[str], streams: list[RequestStream], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            for stream in self._streams:
                stream.abort()


async def _data_messages(chunks: AsyncIterator[BaseModel]) -> AsyncIterator[str]:
    async with contextlib.aclosing(chunks):  # type: ignore[type-var]
        try:
            async for chunk in chunks:
                yield f"data: {chunk.model_dump_json()}\n\n"
        except Exception as exc:  # CancelledError (a disconnect) is a BaseException and passes through
            yield describe(exc).sse_event()
    yield _DONE


async def _named_messages(events: AsyncIterator[NamedEvent]) -> AsyncIterator[str]:
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        try:
            async for event in events:
                yield f"event: {event.type}\ndata: {event.model_dump_json()}\n\n"
        except Exception as exc:  # as in _data_messages
            yield describe(exc).sse_event(name="error")


async def merge_streams(streams: list[RequestStream]) -> AsyncIterator[tuple[int, RequestOutput]]:
    """(index of the stream, output) from several request streams, as outputs arrive.

    Exiting early, or an error in any stream, aborts every stream still running.
    """
    if len(streams) == 1:
        async with streams[0]:
            async for output in streams[0]:
                yield 0, output
        return
    queue: asyncio.Queue[tuple[int, RequestOutput | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, stream: RequestStream) -> None:
        try:
            async for output in stream:
                queue.put_nowait((index, output))
        except Exception as exc:
            queue.put_nowait((index, exc))
            return
        queue.put_nowait((index, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(streams)
        while remaining:
            index, item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        for stream in streams:
            stream.abort()
