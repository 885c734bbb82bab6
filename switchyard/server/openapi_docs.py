"""What the OpenAPI document says each route answers: the real response model and every error status.

Handlers return `Response` objects they serialise themselves (exact field control), so FastAPI cannot infer
their schemas; these declarations give each route its pydantic response model, its event-stream form where it
streams, and the statuses it can answer with the OpenAI error body. FastAPI's automatic 422 is dropped: this
server answers validation failures with 400, as OpenAI does.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from switchyard.server.protocol import ErrorResponse, ResponseBody

ERROR_STATUSES = {
    400: "Invalid request (a bad field, a prompt over the context, text that is not valid Unicode...)",
    401: "Missing or wrong API key (when the server has one)",
    404: "Unknown model",
    413: "Request body over --max-request-bytes",
    429: "Queue full or KV cache full (Retry-After says when to come back)",
    500: "Internal error",
    503: "Shutting down (Retry-After) or engine unavailable",
}

Responses = dict[int | str, dict[str, Any]]


def documented(model: type[BaseModel] | None, *, streams: bool = False, errors: bool = True) -> Responses:
    """The `responses` of a route answering `model` as JSON (and, if it `streams`, server-sent events)."""
    ok: dict[str, Any] = {"description": "Success"}
    if model is not None:
        ok["model"] = model
    if streams:
        ok["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
        ok["description"] = "The result as JSON, or with `stream: true` as server-sent events"
    responses: Responses = {200: ok}
    if errors:
        responses.update(
            {status: {"model": ErrorResponse, "description": text} for status, text in ERROR_STATUSES.items()}
        )
    return responses


class HealthStatus(ResponseBody):
    status: str
    """`ok`, or with a 503 `shutting_down` or `engine_unavailable`."""


class VersionInfo(ResponseBody):
    version: str


class PrefixCacheReset(ResponseBody):
    freed_blocks: int


def drop_automatic_422(app: FastAPI) -> None:
    """Make the app's OpenAPI document leave out FastAPI's 422 entries (never answered here)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for unused in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(unused, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
