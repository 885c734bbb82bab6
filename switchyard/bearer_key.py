"""One bearer-key check for the hosts whose /v1 routes need a single key: the fleet gateway, the agent console
host and the embeddings server (the model server keeps its own, which also knows tenants' keys)."""

from __future__ import annotations

import hmac

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from switchyard.openai_error import invalid_api_key


class BearerKeyMiddleware:
    """Requires `Authorization: Bearer <key>` on /v1 before the body is read; the pages at /ui stay public."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        if not key.strip():
            raise ValueError("the API key must not be empty or blank: a blank key would let any client in")
        self.app = app
        self._key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1") and not self._authorized(scope):
            info = invalid_api_key("Incorrect or missing API key (use Authorization: Bearer).")
            response = JSONResponse(info.body(), status_code=info.status, headers=info.headers)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        header = Headers(scope=scope).get("authorization", "").encode()
        scheme, _, token = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key)
