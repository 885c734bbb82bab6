"""The gateway's FastAPI app: the OpenAI routes proxied to the pools, and the routes for operators.

`build_gateway_app(runtime)` wires the pieces; the request path itself is gatekeeper.py's (limits, cache,
hooks, usage) and proxy.py's (routing, retries). Every error response is made by errors.describe(), in
OpenAI's format. The app starts the runtime (launchers, health checks) when it
starts and stops it when it ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchyard import __version__
from switchyard.bearer_key import BearerKeyMiddleware
from switchyard.client_disconnect import until_disconnected
from switchyard.console.mount import ConsoleConfig, mount_console
from switchyard.errors import SwitchyardError
from switchyard.fleet.errors import (
    AuthenticationError,
    BadRequestError,
    ErrorInfo,
    GatewayDrainingError,
    NotEnabledError,
    PermissionDeniedError,
    UnknownModelError,
    describe,
)
from switchyard.fleet.forwarded_headers import REQUEST_ID_HEADER, upstream_headers
from switchyard.fleet.gatekeeper import DEFAULT_TENANT, GateRequest
from switchyard.fleet.metrics import CONTENT_TYPE
from switchyard.fleet.online_eval.feedback import parse_feedback, record_feedback
from switchyard.fleet.prices import MICROS_PER_CREDIT
from switchyard.fleet.proxy import ProxyCall
from switchyard.fleet.request_fields import read_request_fields
from switchyard.fleet.runtime import FleetRuntime
from switchyard.fleet.tenancy.authentication import CALLER_STATE, OPERATOR_STATE, TenantKeyMiddleware
from switchyard.fleet.tenancy.records import Caller
from switchyard.unhandled_errors import UnhandledErrorMiddleware

"""nginx's status for a request whose client left before the answer; nobody receives it, logs show it."""


def build_gateway_app(runtime: FleetRuntime) -> FastAPI:
    """An app serving `runtime`'s pools; the runtime is at `app.state.fleet`."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop(runtime.config.shutdown_grace)

    app = FastAPI(title="Switchyard fleet", version=__version__, lifespan=lifespan)
    app.state.fleet = runtime
    for error_type in (HTTPException, SwitchyardError):
        app.add_exception_handler(error_type, _error_response)
    if runtime.tenancy is not None:
        app.add_middleware(TenantKeyMiddleware, tenancy=runtime.tenancy, operator_key=runtime.config.api_key)
    elif runtime.config.api_key is not None:
        app.add_middleware(BearerKeyMiddleware, key=runtime.config.api_key)
    app.add_middleware(UnhandledErrorMiddleware, describe=describe)  # a 500 that keeps the connection usable
    app.add_middleware(_RequestIdMiddleware)  # outside the key check, so refusals carry the header too
    app.include_router(_openai_routes(runtime))
    app.include_router(_operations_routes(runtime))

    async def fleet_state() -> dict[str, Any]:
        balances = await asyncio.to_thread(runtime.credit_balances)
        credits = (
            None
            if balances is None
            else {tenant: micros / MICROS_PER_CREDIT for tenant, micros in balances.items()}
        )
        return {"replicas": _replica_rows(runtime), "credits": credits}

    # The web console: the playground as on a server, and the fleet's dashboard: replicas, routing,
    # tenants and online evaluation (its data under /v1, behind the gateway's keys).
    keyed = runtime.config.api_key is not None or runtime.tenancy is not None
    console = ConsoleConfig("Switchyard fleet", ("playground", "fleet"), key_required=keyed)
    mount_console(
        app, console, metrics=runtime.metrics.render, extra=fleet_state, guard=_operators_only(runtime)
    )
    return app


def _operators_only(runtime: FleetRuntime) -> Callable[[Request], None]:
    """With tenants, the fleet's live view is the operators': it names every tenant and its spending."""

    def guard(request: Request) -> None:
        if runtime.tenancy is not None and not getattr(request.state, OPERATOR_STATE, False):
            raise PermissionDeniedError("The fleet's live view needs the operators' key.")

    return guard


def _admin_only(runtime: FleetRuntime) -> Callable[[Request], None]:
    """Changing the pools redirects traffic: only with the gateway's --api-key, and with tenants only that
    (operators') key, never a tenant's."""

    def guard(request: Request) -> None:
        if runtime.config.api_key is None:
            raise PermissionDeniedError("Changing the fleet's pools needs the gateway to run with --api-key.")
        if runtime.tenancy is not None and not getattr(request.state, OPERATOR_STATE, False):
            raise PermissionDeniedError("Changing the fleet's pools needs the operators' key.")

    return guard


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise BadRequestError("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequestError("the body must be a JSON object")
    return body


def _replica_rows(runtime: FleetRuntime) -> list[dict[str, Any]]:
    """Every replica's state, for operators: where it is, whether it is routable, how loaded."""
    return [
        {
            "name": replica.name,
            "pool": pool.name,
            "url": replica.url,
            "health": replica.health.value,
            "in_flight": replica.in_flight,
            "queued_prefill_tokens": replica.queued_prefill_tokens,
            "load": {
                "num_waiting": replica.load.num_waiting,
                "num_running": replica.load.num_running,
                "kv_cache_usage": replica.load.kv_cache_usage,
            },
            "ejections": pool.ejections[replica.name],
        }
        for pool in runtime.pools.values()
        for replica in pool.replicas
    ]


async def _error_response(_: Request, exc: Exception) -> Response:
    info = (
        ErrorInfo(exc.status_code, "invalid_request_error", str(exc.detail), headers=dict(exc.headers or {}))
        if isinstance(exc, HTTPException)
        else describe(exc)
    )
    return JSONResponse(info.body(), status_code=info.status, headers=info.headers)


def _openai_routes(runtime: FleetRuntime) -> APIRouter:
    router = APIRouter(prefix="/v1")
    admin = _admin_only(runtime)

    async def proxied(request: Request, endpoint: str) -> Response:
        if runtime.draining:
            raise GatewayDrainingError("The gateway is shutting down; send the request elsewhere.")
        raw = await request.body()
        fields = read_request_fields(raw, endpoint, request.headers)
        caller = _tenant_caller(request) if runtime.tenancy is not None else None
        if caller is not None and not caller.key.may_use(fields.model):
            raise PermissionDeniedError(
                f"This API key may not use the model `{fields.model}`.", param="model"
            )
        request_id: str = request.state.request_id
        config = runtime.config
        gateway_checks_key = config.api_key is not None or runtime.tenancy is not None
        headers = upstream_headers(
            request.headers.items(), request_id, config.worker_api_key, gateway_checks_key
        )
        call = ProxyCall(endpoint=endpoint, body=raw, fields=fields, headers=headers, request_id=request_id)
        gate_request = GateRequest(
            call=call,
            caller=caller,
            cache_namespace=caller.tenant.name if caller is not None else _key_namespace(request),
            cache_control=request.headers.get("cache-control"),
        )
        pool = runtime.pools.get(fields.model)
        cascade = runtime.cascades.get(fields.model)
        if pool is not None:
            return await until_disconnected(request, runtime.gatekeeper.forward(pool, gate_request))
        if cascade is not None:  # a cascade: its tiers' pools in turn
            return await until_disconnected(request, runtime.cascade_runner.forward(cascade, gate_request))
        raise UnknownModelError(fields.model, [*runtime.pools, *runtime.cascades])

    @router.post("/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Response:
        return await proxied(request, "chat")

    @router.post("/completions", response_model=None)
    async def completions(request: Request) -> Response:
        return await proxied(request, "completions")

    @router.post("/responses", response_model=None)
    async def responses(request: Request) -> Response:
        return await proxied(request, "responses")

    def card(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": runtime.created, "owned_by": "switchyard-fleet"}

    def visible(request: Request) -> list[str]:
        """The pools the caller may use (a tenant's key may be limited to some)."""
        caller: Caller | None = getattr(request.state, CALLER_STATE, None)
        names = [*runtime.pools, *runtime.cascades]
        return [name for name in names if caller is None or caller.key.may_use(name)]

    @router.get("/models", response_model=None)
    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [card(name) for name in visible(request)]})

    @router.get("/models/{model:path}", response_model=None)
    async def model(request: Request, model: str) -> Response:
        if model not in visible(request):
            raise UnknownModelError(model, visible(request))
        return JSONResponse(card(model))

    @router.get("/usage", response_model=None)
    async def usage(
        request: Request, tenant: str | None = None, start: str | None = None, end: str | None = None
    ) -> Response:
        """Tokens, requests and cost by tenant and model since `start` (until `end`): the operators' key sees
        every tenant (or the one named), a tenant's key only its own."""
        if runtime.tenancy is None:
            raise NotEnabledError("Usage is recorded only when the gateway runs with --tenants-db.")
        caller: Caller | None = getattr(request.state, CALLER_STATE, None)
        if caller is not None:
            if tenant is not None and tenant != caller.tenant.name:
                raise PermissionDeniedError("A tenant's key reads only its own usage.", param="tenant")
            tenant = caller.tenant.name
        elif not getattr(request.state, OPERATOR_STATE, False):
            raise AuthenticationError("Reading usage needs a tenant's key or the operators' key.")
        since, until = _instant(start, "start"), _instant(end, "end")
        rows = await runtime.tenancy.totals(tenant, since, until)
        return JSONResponse(
            {
                "object": "usage",
                "tenant": tenant,
                "start": since,
                "end": until,
                "data": [row.as_json() for row in rows],
                "total": {
                    "requests": sum(row.requests for row in rows),
                    "cache_hits": sum(row.cache_hits for row in rows),
                    "prompt_tokens": sum(row.usage.prompt_tokens for row in rows),
                    "cached_tokens": sum(row.usage.cached_tokens for row in rows),
                    "output_tokens": sum(row.usage.output_tokens for row in rows),
                    "cost": sum(row.cost for row in rows),
                },
            }
        )

    @router.post("/feedback", response_model=None)
    async def feedback(request: Request) -> Response:
        """A rating (-1..1), a correction or a comment on a logged request (online_eval/feedback.py)."""
        if runtime.online_eval is None:
            raise NotEnabledError("Feedback needs online evaluation: start the gateway with --eval-sample.")
        tenancy = runtime.tenancy is not None
        tenant = _tenant_caller(request).tenant.name if tenancy else DEFAULT_TENANT
        given = parse_feedback(await request.body(), tenant, time.time())
        await record_feedback(runtime.online_eval, given, tenancy)
        return JSONResponse({"object": "feedback", "request_id": given.request_id, "rating": given.rating})

    @router.get("/fleet/replicas", response_model=None)
    async def replicas() -> Response:
        """Every replica's state, for operators: where it is, whether it is routable, how loaded."""
        return JSONResponse({"object": "list", "data": _replica_rows(runtime)})

    @router.post("/fleet/pools/{pool}/workers", response_model=None)
    async def add_worker(request: Request, pool: str) -> Response:
        """A running server joins a pool (a platform's autoscaler registers its replicas here)."""
        admin(request)
        body = _json_object(await request.body())
        url, name = body.get("url"), body.get("name")
        if not isinstance(url, str):
            raise BadRequestError("`url` (the worker's base URL, without /v1) is required", param="url")
        if name is not None and not isinstance(name, str):
            raise BadRequestError("`name` must be a string", param="name")
        replica = runtime.add_worker(pool, url, name)
        row = next(row for row in _replica_rows(runtime) if row["name"] == replica.name)
        return JSONResponse(row, status_code=201)

    @router.delete("/fleet/pools/{pool}/workers/{name}", response_model=None)
    async def remove_worker(request: Request, pool: str, name: str) -> Response:
        admin(request)
        replica = runtime.remove_worker(pool, name)
        return JSONResponse(
            {"object": "fleet.worker.deleted", "name": replica.name, "pool": pool, "deleted": True}
        )

    return router


def _operations_routes(runtime: FleetRuntime) -> APIRouter:
    """Routes for operators and load balancers (no API key)."""
    router = APIRouter()

    @router.get("/health", response_model=None)
    async def health() -> Response:
        """200 while every pool has a routable replica; 503 naming the pools that have none."""
        pools = {
            pool.name: {
                "routable": len(pool.routable()),
                "replicas": len(pool.replicas),
                "queue_depth": pool.admission.depth,
                "states": sorted({replica.health.value for replica in pool.replicas}),
            }
            for pool in runtime.pools.values()
        }
        if runtime.draining:
            return JSONResponse({"status": "shutting_down", "pools": pools}, status_code=503)
        unavailable = sorted(name for name, state in pools.items() if not state["routable"])
        if unavailable:
            return JSONResponse(
                {"status": "unavailable", "unavailable": unavailable, "pools": pools}, status_code=503
            )
        return JSONResponse({"status": "ok", "pools": pools})

    @router.get("/metrics", response_model=None)
    async def metrics() -> Response:
        return Response(content=runtime.metrics.render(), media_type=CONTENT_TYPE)

    @router.get("/version", response_model=None)
    async def version() -> Response:
        return JSONResponse({"version": __version__})

    return router


def _tenant_caller(request: Request) -> Caller:
    """The tenant whose key the request carries; the operators' key does not send requests."""
    caller: Caller | None = getattr(request.state, CALLER_STATE, None)
    if caller is None:
        raise PermissionDeniedError(
            "The operators' key reads usage and the fleet's state; send requests with a tenant's API key."
        )
    return caller


def _key_namespace(request: Request) -> str:
    """Without tenancy, cached answers are kept apart by the client's credentials (a hash, never the key)."""
    credentials = request.headers.get("authorization", "")
    return "key:" + hashlib.sha256(credentials.encode()).hexdigest()[:32]


def _instant(value: str | None, param: str) -> float | None:
    """A query's time: unix seconds, or ISO 8601 (UTC unless it says otherwise)."""
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise BadRequestError(
            f"`{param}` must be unix seconds or an ISO 8601 time, not {value!r}", param=param
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class _RequestIdMiddleware:
    """Gives every request an id, the client's `x-request-id` or a fresh one, for the replicas and the logs;
    answers carry it (a replica's echo of it, or the gateway's own when the gateway answered)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = Headers(scope=scope).get(REQUEST_ID_HEADER) or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if REQUEST_ID_HEADER not in headers:
                    headers[REQUEST_ID_HEADER] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)
