"""The one mapping from typed errors to HTTP statuses and OpenAI error bodies.

Every error a client can see goes through `describe()`: handlers raise typed exceptions and never build error
responses themselves, so a status code or error type changes in one place. Bodies follow OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}`, which the OpenAI client turns into its typed exceptions.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from switchyard.client_disconnect import CLIENT_CLOSED_REQUEST
from switchyard.engine.async_engine import (
    EngineDeadError,
    QueueFullError,
    QueueTimeoutError,
    RequestAbortedError,
    RequestFailedError,
    RequestTimeoutError,
)
from switchyard.errors import CapacityError, InvalidRequestError, SwitchyardError
from switchyard.openai_error import ErrorInfo, invalid_api_key, model_not_found, retry_after_header

logger = logging.getLogger(__name__)


class ModelNotFoundError(SwitchyardError):
    """The request names a model this server does not serve."""

    def __init__(self, model: str) -> None:
        self.model = model
        super().__init__(f"The model `{model}` does not exist.")


class AuthenticationError(SwitchyardError):
    """The request carries no API key, or the wrong one, while the server requires one."""


class RequestTooLargeError(SwitchyardError):
    """The request body is over the server's `--max-request-bytes`."""

    def __init__(self, size: int | None, limit: int) -> None:
        self.size, self.limit = size, limit
        what = f"is {size:,} bytes" if size is not None else "passed it"
        super().__init__(
            f"The request body {what}; this server accepts at most {limit:,} bytes (--max-request-bytes)."
        )


class ServerDrainingError(SwitchyardError):
    """The server is shutting down and admits no new requests."""


class ClientGoneError(SwitchyardError):
    """The client disconnected while its request was being prepared (rendered, tokenized): the work stops."""


DRAINING_RETRY_AFTER = 5
"""Seconds a client is told to wait before retrying a server that is shutting down: by then a load balancer has
seen /health turn 503 and sends it to another replica (or this one has restarted)."""


class UnencodableTextError(HTTPException):
    """A request body holds text no encoder accepts (a lone UTF-16 surrogate such as `\\ud800`).

    An HTTPException because it is raised while FastAPI parses the body, which passes only those through."""

    def __init__(self, param: str) -> None:
        self.param = param
        super().__init__(
            400, f"{param}: the text holds a lone UTF-16 surrogate (\\ud800-\\udfff without its pair)"
        )


def describe(exc: BaseException) -> ErrorInfo:
    """Status, OpenAI error type/code and headers for an exception (500 for anything unexpected)."""
    if isinstance(exc, RequestValidationError):
        return _validation_error(exc.errors())
    if isinstance(exc, InvalidRequestError):
        return ErrorInfo(400, "invalid_request_error", str(exc), param=exc.param)
    if isinstance(exc, AuthenticationError):
        return invalid_api_key(str(exc))
    if isinstance(exc, RequestTooLargeError):
        return ErrorInfo(413, "invalid_request_error", str(exc), code="request_too_large")
    if isinstance(exc, ModelNotFoundError):
        return model_not_found(str(exc))
    if isinstance(exc, QueueFullError):
        return ErrorInfo(
            429,
            "rate_limit_error",
            str(exc),
            code="queue_full",
            headers={"Retry-After": str(math.ceil(exc.retry_after))},
        )
    if isinstance(exc, QueueTimeoutError):
        return ErrorInfo(429, "rate_limit_error", str(exc), code="queue_timeout")
    if isinstance(exc, CapacityError):
        headers = {"Retry-After": str(math.ceil(exc.retry_after))} if exc.retry_after is not None else {}
        return ErrorInfo(429, "rate_limit_error", str(exc), code="kv_cache_full", headers=headers)
    if isinstance(exc, ServerDrainingError):
        return ErrorInfo(
            503,
            "service_unavailable_error",
            str(exc),
            code="shutting_down",
            headers=retry_after_header(DRAINING_RETRY_AFTER),
        )
    if isinstance(exc, ClientGoneError):  # nobody reads it; access logs show it
        return ErrorInfo(
            CLIENT_CLOSED_REQUEST, "invalid_request_error", str(exc), code="client_closed_request"
        )
    if isinstance(exc, EngineDeadError):
        return ErrorInfo(503, "service_unavailable_error", str(exc), code="engine_unavailable")
    if isinstance(exc, RequestAbortedError):
        return ErrorInfo(503, "service_unavailable_error", str(exc), code="request_aborted")
    if isinstance(exc, RequestTimeoutError):
        # x-should-retry: a request that timed out under load would most likely time out again.
        return ErrorInfo(
            504, "timeout_error", str(exc), code="request_timeout", headers={"x-should-retry": "false"}
        )
    if isinstance(exc, RequestFailedError):
        return ErrorInfo(500, "server_error", str(exc), code="request_failed")
    if isinstance(exc, UnencodableTextError):
        return ErrorInfo(400, "invalid_request_error", str(exc.detail), param=exc.param)
    if isinstance(exc, HTTPException):
        return ErrorInfo(
            exc.status_code, "invalid_request_error", str(exc.detail), headers=dict(exc.headers or {})
        )
    logger.error("unexpected error while serving a request", exc_info=exc)
    return ErrorInfo(500, "server_error", f"internal server error: {type(exc).__name__}: {exc}")


def _validation_error(errors: Sequence[Any]) -> ErrorInfo:
    """A pydantic/FastAPI validation failure -> 400 naming the first offending field."""
    if not errors:
        return ErrorInfo(400, "invalid_request_error", "invalid request body")
    first = errors[0]
    kind = first.get("type", "")
    location = [str(part) for part in first.get("loc", ()) if part != "body"]
    if kind == "json_invalid":
        context = first.get("ctx", {}).get("error", "")
        return ErrorInfo(
            400, "invalid_request_error", f"request body is not valid JSON: {context}".rstrip(": ")
        )
    if kind in ("missing", "model_attributes_type", "model_type", "dict_type") and not location:
        return ErrorInfo(400, "invalid_request_error", "request body must be a JSON object")
    param = ".".join(location) or None
    message = first.get("msg", "invalid value")
    if isinstance(message, str) and message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    text = f"{param}: {message}" if param else message
    return ErrorInfo(400, "invalid_request_error", text, param=param)
