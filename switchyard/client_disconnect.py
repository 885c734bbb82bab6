"""Cancel work when its HTTP client disconnects: shared by the server and the fleet gateway (torch-free).

FastAPI notices a disconnect only when it writes, and a non-streamed answer writes nothing until it is done,
so without this a request would go on generating (or wait in a queue) for a client that left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import Request
from fastapi.responses import Response

CLIENT_CLOSED_REQUEST = 499
"""nginx's status for a request whose client went away before the answer (nothing reaches the client)."""

T = TypeVar("T")


async def until_disconnected(request: Request, work: Awaitable[T]) -> T | Response:
    """Await `work`, cancelling it if the client disconnects first (then a 499 response, which no one reads)."""
    work_task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_wait_for_disconnect(request))
    try:
        await asyncio.wait({work_task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not work_task.done():
            work_task.cancel()
            await asyncio.gather(work_task, return_exceptions=True)
    if work_task.cancelled():
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return work_task.result()


async def _wait_for_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T], gone: Callable[[], Exception]) -> T:
    """`work`'s result, or `gone()` raised if the client disconnects first (`work` is then cancelled: a text
    job still queued for its thread never runs). For work that does not itself return a Response."""
    result = await until_disconnected(request, work)
    if isinstance(result, Response):
        raise gone()
    return result
