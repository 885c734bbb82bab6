"""The FastAPI app: routes, API-key check, error mapping and the engine's lifetime.

`build_app(engine, settings)` wires the pieces; the endpoint logic lives in chat.py, completions.py and
responses.py, and every error response is made by errors.describe(). The app starts the async engine's step
loop when it starts (inside uvicorn's event loop, which the loop must share with the handlers) and stops it
when it ends.
"""

from __future__ import annotations

import asyncio
import hmac
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchyard import __version__
from switchyard.console.mount import ConsoleConfig, mount_console
from switchyard.engine.async_engine import AsyncLLMEngine
from switchyard.errors import SwitchyardError
from switchyard.server.body_limit import BodySizeLimitMiddleware
from switchyard.server.chat import create_chat_completion
from switchyard.server.chat_protocol import ChatCompletionRequest, ChatCompletionResponse
from switchyard.server.completions import create_completion
from switchyard.server.completions_protocol import CompletionRequest, CompletionResponse
from switchyard.server.cors import add_cors
from switchyard.server.edge import CheckedRoute
from switchyard.server.errors import DRAINING_RETRY_AFTER, AuthenticationError, ModelNotFoundError, describe
from switchyard.server.kv_events import KVEventsResponse, read_kv_events
from switchyard.server.metrics import CONTENT_TYPE, ServerMetrics
from switchyard.server.openapi_docs import (
    HealthStatus,
    PrefixCacheReset,
    VersionInfo,
    documented,
    drop_automatic_422,
)
from switchyard.server.protocol import ModelCard, ModelList
from switchyard.server.responses import create_response
from switchyard.server.responses_protocol import ResponseObject, ResponsesRequest
from switchyard.server.state import ServerSettings, ServerState
from switchyard.server.tokenize import detokenize, tokenize
from switchyard.server.tokenize_protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from switchyard.unhandled_errors import UnhandledErrorMiddleware


def build_app(engine: AsyncLLMEngine, settings: ServerSettings) -> FastAPI:
    """An app serving `engine` under `settings`; its state (ServerState) is at `app.state.server`."""
    metrics = ServerMetrics(
        settings.served_model_names[0], known_tenants(engine, settings), settings.max_tenant_labels
    )
    engine.add_listener(metrics.observe_step)
    state = ServerState(engine=engine, settings=settings, metrics=metrics)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        try:
            yield
        finally:
            await engine.shutdown()

    app = FastAPI(title="Switchyard", version=__version__, lifespan=lifespan)
    app.state.server = state
    drop_automatic_422(app)
    for error_type in (RequestValidationError, HTTPException, SwitchyardError):
        app.add_exception_handler(error_type, _error_response)
    keys = dict(settings.tenant_keys)
    if settings.api_key is not None:
        keys[settings.api_key] = "default"
    if settings.max_request_bytes is not None:
        app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes)
    if keys:  # outside the size limit: an unauthenticated client learns nothing about the server's limits
        app.add_middleware(_ApiKeyMiddleware, keys=keys)
    app.add_middleware(
        UnhandledErrorMiddleware, describe=describe
    )  # the last-resort 500, which keeps the connection usable
    app.add_middleware(_RequestIdMiddleware)  # outside the checks, so refusals carry the header too
    if settings.cors is not None:  # outermost: preflights carry no credentials, and refusals get its headers
        add_cors(app, settings.cors)
    app.include_router(_openai_routes(state))
    app.include_router(_operations_routes(state))
    # The web console: the chat playground and the engine's live dashboard (its data under /v1, keyed).
    console = ConsoleConfig("Switchyard", ("playground", "dashboard"), key_required=bool(keys))
    mount_console(app, console, metrics=state.metrics.render, draining=lambda: state.draining)
    return app


async def _error_response(_: Request, exc: Exception) -> Response:
    info = describe(exc)
    return JSONResponse(info.body(), status_code=info.status, headers=info.headers)


def _json(result: BaseModel | Response) -> Response:
    """A response model serialised by pydantic directly (exact field control, no jsonable_encoder pass)."""
    if isinstance(result, Response):
        return result
    return Response(content=result.model_dump_json(), media_type="application/json")


def _openai_routes(state: ServerState) -> APIRouter:
    router = APIRouter(prefix="/v1", route_class=CheckedRoute)

    @router.post(
        "/chat/completions", response_model=None, responses=documented(ChatCompletionResponse, streams=True)
    )
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return _json(await create_chat_completion(body, state, request))

    @router.post("/completions", response_model=None, responses=documented(CompletionResponse, streams=True))
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return _json(await create_completion(body, state, request))

    @router.post("/responses", response_model=None, responses=documented(ResponseObject, streams=True))
    async def responses(body: ResponsesRequest, request: Request) -> Response:
        """OpenAI's Responses API, stateless, served through the chat path."""
        return await create_response(body, state, request)

    def card(name: str) -> ModelCard:
        root = str(state.engine.model_path)
        return ModelCard(
            id=name,
            created=state.created,
            root=root,
            max_model_len=state.engine.max_model_len,
            quantization=state.engine.quantization,
        )

    @router.get("/models", response_model=None, responses=documented(ModelList))
    async def models() -> Response:
        return _json(ModelList(data=[card(name) for name in state.settings.served_model_names]))

    @router.get("/models/{model:path}", response_model=None, responses=documented(ModelCard))
    async def model(model: str) -> Response:
        """One model's card (the openai client's `models.retrieve`); 404 model_not_found for others."""
        if model not in state.settings.served_model_names:
            raise ModelNotFoundError(model)
        return _json(card(model))

    return router


def _operations_routes(state: ServerState) -> APIRouter:
    """Routes for operators and load balancers (no API key), and vLLM's tokenizer and cache-reset routes (the
    key's, if set)."""
    router = APIRouter(route_class=CheckedRoute)

    @router.get(
        "/health",
        response_model=None,
        responses={
            **documented(HealthStatus, errors=False),
            503: {"model": HealthStatus, "description": "Shutting down or engine unavailable"},
        },
    )
    async def health() -> Response:
        if state.draining:
            return JSONResponse(
                {"status": "shutting_down"},
                status_code=503,
                headers={"Retry-After": str(DRAINING_RETRY_AFTER)},
            )
        if not state.engine.is_alive:
            return JSONResponse({"status": "engine_unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @router.get(
        "/metrics",
        response_model=None,
        responses={
            200: {
                "description": "Prometheus text format",
                "content": {CONTENT_TYPE: {"schema": {"type": "string"}}},
            }
        },
    )
    async def metrics() -> Response:
        # Rendered on a worker thread: a large exposition must not hold up the event loop.
        return Response(content=await asyncio.to_thread(state.metrics.render), media_type=CONTENT_TYPE)

    @router.post("/tokenize", response_model=None, responses=documented(TokenizeResponse))
    async def tokenize_route(body: TokenizeRequest) -> Response:
        """vLLM's: a prompt's or a conversation's token ids, counted as the engine would get them."""
        return _json(await tokenize(body, state))

    @router.post("/detokenize", response_model=None, responses=documented(DetokenizeResponse))
    async def detokenize_route(body: DetokenizeRequest) -> Response:
        return _json(await detokenize(body, state))

    @router.get("/v1/kv_events", response_model=None, responses=documented(KVEventsResponse))
    async def kv_events(after: int = Query(-1, ge=-1), epoch: str | None = None) -> Response:
        """The prefix cache's stored/evicted block hashes after sequence number `after`, for KV-aware routers
        (`-1`: a snapshot of the whole cache). Under /v1, so it needs the API key when one is set."""
        return _json(await read_kv_events(state.engine, after, epoch))

    @router.post("/reset_prefix_cache", response_model=None, responses=documented(PrefixCacheReset))
    async def reset_prefix_cache() -> Response:
        """vLLM's: forget the cached prefixes no request is using, so a benchmark can start each run cold.
        Blocks of requests in flight stay. It changes what every client's next request costs, so it needs the
        API key when one is set."""
        freed = await state.engine.run_in_engine_thread(state.engine.engine.reset_prefix_cache)
        return JSONResponse({"freed_blocks": freed})

    @router.get("/version", response_model=None, responses=documented(VersionInfo, errors=False))
    async def version() -> Response:
        return JSONResponse({"version": __version__})

    return router


def known_tenants(engine: AsyncLLMEngine, settings: ServerSettings) -> frozenset[str]:
    """Tenants an operator configured (`--tenants` weights and keys, and the API key's "default"): metrics
    always label them by name; other names only up to `--max-tenant-labels`."""
    weights = engine.engine.config.tenant_weights
    return frozenset({"default", *weights, *settings.tenant_keys.values()})


PROTECTED_PATHS = ("/v1", "/tokenize", "/detokenize", "/reset_prefix_cache")
"""Routes that need the API key when one is set: everything that reaches the model, its tokenizer or its
cache."""


def route_path(scope: Scope) -> str:
    """The path the routes match: uvicorn puts `--root-path` in front of the request's path, and the router
    takes it off again, so a check on the raw path would miss every protected route behind a root path. (The
    same rule as Starlette's router, whose helper is private.)"""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path) and path[len(root_path) : len(root_path) + 1] in ("", "/"):
        return path[len(root_path) :] or "/"
    return path


class _ApiKeyMiddleware:
    """Requires `Authorization: Bearer <key>` on /v1 and the tokenizer routes, before the body is even read.

    A plain ASGI middleware rather than a FastAPI dependency, because dependencies run after the body is
    parsed: an unauthenticated client would learn whether its JSON was valid before being refused.
    """

    def __init__(self, app: ASGIApp, keys: dict[str, str]) -> None:
        self.app = app
        self._keys = [(key.encode(), tenant) for key, tenant in keys.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and route_path(scope).startswith(PROTECTED_PATHS):
            tenant = self._tenant(scope)
            if tenant is None:
                info = describe(
                    AuthenticationError("Incorrect or missing API key (use Authorization: Bearer).")
                )
                response = JSONResponse(info.body(), status_code=info.status, headers=info.headers)
                await response(scope, receive, send)
                return
            # The key's tenant, read by the handlers through request.state (fair share, metrics).
            scope.setdefault("state", {})["tenant"] = tenant
        await self.app(scope, receive, send)

    def _tenant(self, scope: Scope) -> str | None:
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        token = token.strip()
        found = None
        for key, tenant in self._keys:  # compare against every key: timing does not reveal which matched
            if hmac.compare_digest(token, key):
                found = tenant
        return found


class _RequestIdMiddleware:
    """Answers every HTTP request with an `x-request-id` header: the client's own, else a fresh one.

    OpenAI's API sends one on every response and the openai client exposes it (`response._request_id`,
    `APIError.request_id`) for logs and bug reports; vLLM echoes the client's header the same way.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = Headers(scope=scope).get("x-request-id") or uuid.uuid4().hex

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["x-request-id"] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)
