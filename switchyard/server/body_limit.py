"""A cap on request body size, enforced before anything parses the body.

Starlette reads a whole body into memory before FastAPI validates it, and JSON parsing, chat templates and
tokenization then take many times its size, so a single oversized body could take the memory every other
request needs. A declared Content-Length over the cap is refused without reading a byte; a chunked body is
read up to the cap and refused as soon as it passes it.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchyard.server.errors import RequestTooLargeError, describe


class BodySizeLimitMiddleware:
    """Answers 413 (OpenAI error shape, code `request_too_large`) to bodies over `max_bytes`."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_bytes:
                await self._refuse(scope, send, int(declared))
                return
            await self.app(scope, receive, send)  # the server holds the body to its declared length
            return
        # No declared length (chunked): buffer up to the cap, then replay what was read to the app.
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(scope, send, None)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send, size: int | None) -> None:
        info = describe(RequestTooLargeError(size, self.max_bytes))
        response = JSONResponse(
            info.body(), status_code=info.status, headers={**info.headers, "Connection": "close"}
        )

        async def no_body() -> Message:
            return {"type": "http.disconnect"}

        await response(scope, no_body, send)
