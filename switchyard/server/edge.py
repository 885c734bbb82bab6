"""Where request bodies enter the app: their text checked once, as they are parsed.

Every JSON body is parsed by `CheckedRequest.json()`, the one place FastAPI decodes bodies, so a lone UTF-16
surrogate in any field (content, prompt, model, bad_words, a tool schema...) is a 400 naming the field, before
any handler, tokenizer or metric sees the text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from switchyard.json_text import lone_surrogate_path
from switchyard.server.errors import UnencodableTextError


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
