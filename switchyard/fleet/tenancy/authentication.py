"""Who is calling: every /v1 request of a gateway with tenancy carries a tenant's key or the operators' key.

An ASGI middleware, so a request without a valid key is refused before its body is read. A tenant's key puts
its `Caller` (tenant and key record) on the request's state; the operators' key (the gateway's `--api-key`)
marks the request as the operators'. /health and /metrics stay open for load balancers and Prometheus.
"""

from __future__ import annotations

import hmac

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from switchyard.fleet.errors import AuthenticationError, describe
from switchyard.fleet.tenancy.service import Tenancy

CALLER_STATE = "caller"
"""request.state's attribute holding the tenant's `Caller` (absent for the operators' key)."""
OPERATOR_STATE = "operator"
"""request.state's attribute that is True for a request with the operators' key."""


class TenantKeyMiddleware:
    def __init__(self, app: ASGIApp, tenancy: Tenancy, operator_key: str | None) -> None:
        self.app = app
        self._tenancy = tenancy
        self._operator_key = operator_key.encode() if operator_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1"):
            await self.app(scope, receive, send)
            return
        token = _bearer_token(Headers(scope=scope).get("authorization", ""))
        state = scope.setdefault("state", {})
        try:
            if self._operator_key is not None and hmac.compare_digest(token.encode(), self._operator_key):
                state[OPERATOR_STATE] = True
            else:
                caller = await self._tenancy.resolve(token) if token else None
                if caller is None:
                    raise AuthenticationError("Incorrect or missing API key (use Authorization: Bearer).")
                state[CALLER_STATE] = caller
        except Exception as exc:
            info = describe(exc)
            response = JSONResponse(info.body(), status_code=info.status, headers=info.headers)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _bearer_token(header: str) -> str:
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
