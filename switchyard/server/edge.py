"""Where requests enter the app: body text checked once as it is parsed, and a last-resort 500 that keeps the
connection usable.

Every JSON body is parsed by `CheckedRequest.json()`, the one place FastAPI decodes bodies, so a lone UTF-16
surrogate in any field (content, prompt, model, bad_words, a tool schema...) is a 400 naming the field, before
any handler, tokenizer or metric sees the text.

An exception no handler maps would otherwise reach Starlette's outermost error middleware, which answers 500
and then re-raises; uvicorn then closes the keep-alive connection without `Connection: close`, so the
client's next request on it fails with a reset. `UnhandledErrorMiddleware` answers the 500 itself (OpenAI
error shape) and lets the connection live on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchyard.json_text import lone_surrogate_path
from switchyard.server.errors import UnencodableTextError, describe


class CheckedRequest(Request):
    """A request whose parsed JSON body holds only encodable text (UnencodableTextError: 400 otherwise)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = json.loads(await self.body())
            bad = lone_surrogate_path(body)
            if bad is not None:
                raise UnencodableTextError(bad)
            self._json = body
        return self._json


class CheckedRoute(APIRoute):
    """An API route that parses its body with CheckedRequest."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            return await handler(CheckedRequest(request.scope, request.receive))

        return checked


class UnhandledErrorMiddleware:
    """Answers an exception no handler mapped with the OpenAI-shaped 500, without re-raising it.

    Once a response has started, its status cannot change: the exception is re-raised and the server ends
    that connection, which is the only honest thing left to do with a half-sent response.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

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
            info = describe(exc)  # logs it with its traceback
            response = JSONResponse(info.body(), status_code=info.status, headers=info.headers)
            await response(scope, receive, send)
