"""A last-resort 500 in the OpenAI error shape that keeps the connection usable (the server's and the gateway's).

An exception no handler maps would otherwise reach Starlette's outermost error middleware, which answers 500
and then re-raises it; uvicorn then closes the keep-alive connection without sending `Connection: close`, so
the client's next request on that connection fails with a reset. This middleware answers the 500 itself and
does not re-raise, so the connection lives on.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchyard.openai_error import ErrorInfo


class UnhandledErrorMiddleware:
    """Answers an exception no handler mapped with `describe(exc)` (which logs it), without re-raising it.

    Once a response has started, its status cannot change: the exception is re-raised and the server ends
    that connection, the only honest thing left to do with a half-sent response.
    """

    def __init__(self, app: ASGIApp, describe: Callable[[BaseException], ErrorInfo]) -> None:
        self.app = app
        self.describe = describe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:
                raise
            info = self.describe(exc)
            response = JSONResponse(info.body(), status_code=info.status, headers=info.headers)
            await response(scope, receive, send)
