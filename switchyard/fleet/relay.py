"""A replica's server-sent events passed on to the client as they arrive, whole events at a time.

Bytes are forwarded as soon as they complete an event, never batched further, so tokens reach the client when
the replica sends them. Holding back a partial event means that when the replica dies mid-stream the client
never sees half an event: the stream ends with an OpenAI error event (`data: {"error": ...}` then
`data: [DONE]`, or `event: error` in a Responses stream), on which the OpenAI client raises APIError, and the
connection closes. A replica that stops answering without closing the connection (hung, or on a lost node)
is declared lost by the health checker, and its streams end the same way at once; any other stall ends at
the read timeout. Either way a stream never hangs.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

import aiohttp
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from switchyard.fleet.errors import REPLICA_LOST
from switchyard.fleet.usage import cached_tokens_in_events

logger = logging.getLogger(__name__)

_DONE = b"data: [DONE]\n\n"


class EventFramer:
    """Splits a byte stream at SSE event boundaries (a blank line, `\\n\\n` or `\\r\\n\\r\\n`)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        """The complete events `chunk` finishes (possibly none: b""); the rest waits for more bytes."""
        data = self._pending + chunk if self._pending else chunk
        lf, crlf = data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n")
        end = max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)
        self._pending = data[end:]
        return data[:end]

    def rest(self) -> bytes:
        """Bytes after the last complete event (a stream that ended without a final blank line)."""
        rest, self._pending = self._pending, b""
        return rest


class StreamEnd(enum.Enum):
    COMPLETED = "200"
    REPLICA_LOST = "stream_error"
    """The replica failed or stalled after the first byte; the client got an error event."""
    CLIENT_GONE = "499"


@dataclass
class StreamOutcome:
    end: StreamEnd
    cached_tokens: int | None
    """The last `cached_tokens` the replica reported in the stream (with include_usage), else None."""


class _ReplicaLostError(Exception):
    """The pool declared the stream's replica lost while the relay waited for it."""


class _LostWatch:
    """Interrupts a pending read from the replica when `lost` resolves.

    A callback rather than a task racing each read, so a chunk costs nothing extra: the read is cancelled in
    place, and the cancellation is taken back (the client's request goes on, to receive the error event).
    """

    def __init__(self, lost: asyncio.Future[None]) -> None:
        self._lost = lost
        self._reader: asyncio.Task[object] | None = None
        lost.add_done_callback(self._interrupt)

    async def read(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        """The next chunk, None at the end; _ReplicaLostError once the replica is lost."""
        if self._lost.done():
            raise _ReplicaLostError
        task = asyncio.current_task()
        self._reader = task
        try:
            return await anext(chunks, None)
        except asyncio.CancelledError:
            if task is not None and self._lost.done() and task.uncancel() == 0:
                raise _ReplicaLostError from None
            raise
        finally:
            self._reader = None

    def close(self) -> None:
        self._lost.remove_done_callback(self._interrupt)

    def _interrupt(self, _: asyncio.Future[None]) -> None:
        if self._reader is not None:
            self._reader.cancel()


class RelayedStream(StreamingResponse):
    """The client's response for a replica's event stream whose first event has arrived.

    `on_finish` is called exactly once, however the response ends, even if it never starts (a client gone
    before the headers): it returns the replica's slot. `watch` adds an observer of the events on their way
    (the gateway's usage meter) and an awaited callback at the end, with the same guarantee.
    """

    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        first: bytes,
        chunks: AsyncIterator[bytes],
        framer: EventFramer,
        named_events: bool,
        headers: Mapping[str, str],
        on_finish: Callable[[StreamOutcome], None],
        lost: asyncio.Future[None],
        on_first_token: Callable[[], None],
    ) -> None:
        """`lost` resolves if the replica is declared lost (see Pool.lost_signal); `on_first_token` is called
        once, at the first event past the stream's opening ones (the replica's prefill is done), or at the end."""
        self._on_first_token: Callable[[], None] | None = on_first_token
        self._upstream = upstream
        self._lost = lost
        self._named_events = named_events
        self._on_finish: Callable[[StreamOutcome], None] | None = on_finish
        self._observers: list[Callable[[bytes], bytes]] = []
        self._on_end: list[Callable[[StreamOutcome], Awaitable[None]]] = []
        self._outcome = StreamOutcome(StreamEnd.CLIENT_GONE, cached_tokens_in_events(first))
        super().__init__(
            self._relay(first, chunks, framer),
            status_code=upstream.status,
            headers=headers,
            media_type=upstream.headers.get("content-type", "text/event-stream"),
        )

    def watch(
        self, observer: Callable[[bytes], bytes], on_end: Callable[[StreamOutcome], Awaitable[None]]
    ) -> None:
        """`observer` sees each batch of complete events before the client and returns what to send instead
        (observers added earlier see the events first); `on_end` is awaited once when the response has
        ended, after the replica's slot was returned."""
        self._observers.append(observer)
        self._on_end.append(on_end)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            release(self._upstream)
            self._finish()
            for on_end in self._on_end:
                await on_end(self._outcome)

    def _first_token(self) -> None:
        if self._on_first_token is not None:
            on_first_token, self._on_first_token = self._on_first_token, None
            on_first_token()

    def _finish(self) -> None:
        self._first_token()
        if self._on_finish is not None:
            on_finish, self._on_finish = self._on_finish, None
            on_finish(self._outcome)

    async def _relay(
        self, first: bytes, chunks: AsyncIterator[bytes], framer: EventFramer
    ) -> AsyncIterator[bytes]:
        if _carries_output(first):
            self._first_token()
        yield self._observed(first)
        watch = _LostWatch(self._lost)
        try:
            while (chunk := await watch.read(chunks)) is not None:
                events = framer.feed(chunk)
                if events:
                    if self._on_first_token is not None and _carries_output(events):
                        self._first_token()
                    self._observe(events)
                    if _ends_the_answer(events):
                        # the client has the whole answer once these are sent: a client that closes right
                        # after the last event (before the replica's EOF is read) still got it complete
                        self._outcome.end = StreamEnd.COMPLETED
                    events = self._observed(events)
                    if events:
                        yield events
            rest = framer.rest()
            if rest:
                yield self._observed(rest)
            self._outcome.end = StreamEnd.COMPLETED
        except (TimeoutError, aiohttp.ClientError, _ReplicaLostError) as exc:
            why = "the replica was declared lost" if isinstance(exc, _ReplicaLostError) else repr(exc)
            logger.warning("stream from %s broke off: %s", self._upstream.url, why)
            self._outcome.end = StreamEnd.REPLICA_LOST
            yield REPLICA_LOST.sse_event("error" if self._named_events else None).encode()
            if not self._named_events:
                yield _DONE
        finally:
            watch.close()

    def _observed(self, events: bytes) -> bytes:
        for observer in self._observers:
            events = observer(events)
        return events

    def _observe(self, events: bytes) -> None:
        reported = cached_tokens_in_events(events)
        if reported is not None:
            self._outcome.cached_tokens = reported


_OPENING_MARKS = (b'"role":"assistant"', b"event: response.created", b"event: response.in_progress")
"""What the events a server sends before its prefill carry: a chat stream's role chunk (Switchyard, vLLM and
SGLang alike), a Responses stream's created and in_progress events."""


def _carries_output(events: bytes) -> bool:
    """Whether complete events hold one past a stream's opening ones: the replica has finished the prefill."""
    for event in events.replace(b"\r\n", b"\n").split(b"\n\n"):
        if event.strip() and not any(mark in event for mark in _OPENING_MARKS):
            return True
    return False


def _ends_the_answer(events: bytes) -> bool:
    """Whether complete events hold a stream's last one: `data: [DONE]`, or the Responses API's final event
    (whole events only: the same words inside a token's text are not an ending)."""
    for event in events.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = event.strip().split(b"\n")
        if lines == [_DONE.strip()] or lines[0] == b"event: response.completed":
            return True
    return False


def release(upstream: aiohttp.ClientResponse) -> None:
    """Done with a replica's answer: its connection goes back to the pool when the answer was read to the end,
    else it is closed (a client gone mid-stream: the replica sees the disconnect and aborts)."""
    if upstream.content.at_eof():
        upstream.release()
    else:
        upstream.close()
