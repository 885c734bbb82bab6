"""The gateway's typed errors and their one mapping to HTTP statuses and OpenAI error bodies.

Handlers raise these and never build error responses themselves. Bodies follow OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}`, which the OpenAI client turns into its typed exceptions.
(The server has the same mapping for the engine's errors; the fleet keeps its own because it imports no engine.)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from switchyard.errors import SwitchyardError
from switchyard.openai_error import ErrorInfo, invalid_api_key, model_not_found, retry_after_header

logger = logging.getLogger(__name__)


class FleetConfigError(SwitchyardError, ValueError):
    """The fleet's configuration (flags or --config file) is inconsistent; the message says what to change."""


class BadRequestError(SwitchyardError):
    """The request body cannot be routed: not JSON, not an object, or without a `model`."""

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class UnknownModelError(SwitchyardError):
    """The request names a model no pool serves."""

    def __init__(self, model: str, pools: Sequence[str]) -> None:
        self.model = model
        listed = ", ".join(f"`{name}`" for name in pools) or "none"
        super().__init__(f"The model `{model}` does not exist. This gateway serves: {listed}.")


class AuthenticationError(SwitchyardError):
    """The request carries no API key, or the wrong one, while the gateway requires one."""


class QueueFullError(SwitchyardError):
    """The pool's replicas are all at their in-flight limit and its waiting queue is full."""

    def __init__(self, pool: str, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(f"The `{pool}` pool is at capacity; retry after {math.ceil(retry_after)} s.")


class NoHealthyReplicaError(SwitchyardError):
    """No replica of the pool can take the request: none is healthy, or every one already failed it."""

    def __init__(self, pool: str, retry_after: float, detail: str = "no healthy replica") -> None:
        self.retry_after = retry_after
        super().__init__(f"The `{pool}` pool has {detail}; retry after {math.ceil(retry_after)} s.")


class GatewayDrainingError(SwitchyardError):
    """The gateway is shutting down and admits no new requests."""


class InsufficientQuotaError(SwitchyardError):
    """The tenant's credit does not cover the request's reservation (prompt + max_tokens at the model's price)."""

    def __init__(self, tenant: str, needed: str, available: str) -> None:
        self.tenant = tenant
        super().__init__(
            f"You exceeded your current quota: this request reserves {needed} credits (its prompt and max_tokens "
            f"at the model's price) and tenant `{tenant}` has {available}. Ask for a grant, or lower max_tokens."
        )


class UnpricedModelError(SwitchyardError):
    """The gateway charges credits but has no price for the model the request names."""

    def __init__(self, model: str) -> None:
        self.model = model
        super().__init__(f"The model `{model}` has no price, so this gateway cannot charge for it.")


class PermissionDeniedError(SwitchyardError):
    """The caller's key is valid but may not do this: use this model, or read another tenant's usage."""

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class RateLimitedError(SwitchyardError):
    """A key is over one of its limits (requests or tokens per minute, concurrent requests)."""

    def __init__(self, message: str, limit: str, retry_after: float) -> None:
        self.limit = limit
        """`requests`, `tokens` or `concurrency`: OpenAI's error type names the first two the same way."""
        self.retry_after = retry_after
        super().__init__(message)


class NotEnabledError(SwitchyardError):
    """The route needs a feature this gateway was started without (usage needs --tenants-db)."""


class ConflictError(SwitchyardError):
    """The change clashes with the fleet as it is (a worker already in the pool, a replica its launcher owns)."""


class UnknownWorkerError(SwitchyardError):
    """No replica of that name is in the pool."""


class UnknownRequestError(SwitchyardError):
    """Feedback names a request id the online-eval log does not hold (not sampled, or another tenant's)."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        super().__init__(f"No logged request has the id `{request_id}`.")


def describe(exc: BaseException) -> ErrorInfo:
    """Status, OpenAI error type/code and headers for an exception (500, without internals, for the unexpected)."""
    if isinstance(exc, BadRequestError):
        return ErrorInfo(400, "invalid_request_error", str(exc), param=exc.param)
    if isinstance(exc, AuthenticationError):
        return invalid_api_key(str(exc))
    if isinstance(exc, UnknownModelError):
        return model_not_found(str(exc))
    if isinstance(exc, QueueFullError):
        return ErrorInfo(
            429, "rate_limit_error", str(exc), code="queue_full", headers=retry_after_header(exc.retry_after)
        )
    if isinstance(exc, NoHealthyReplicaError):
        return ErrorInfo(
            503,
            "service_unavailable_error",
            str(exc),
            code="no_healthy_replica",
            headers=retry_after_header(exc.retry_after),
        )
    if isinstance(exc, InsufficientQuotaError):
        # OpenAI's answer when an account is out of credit; `x-should-retry: false` stops the official client
        # from retrying a 429 that waiting will not fix.
        return ErrorInfo(
            429,
            "insufficient_quota",
            str(exc),
            code="insufficient_quota",
            headers={"x-should-retry": "false"},
        )
    if isinstance(exc, UnpricedModelError):
        return ErrorInfo(400, "invalid_request_error", str(exc), param="model", code="model_not_priced")
    if isinstance(exc, GatewayDrainingError):
        return ErrorInfo(503, "service_unavailable_error", str(exc), code="shutting_down")
    if isinstance(exc, PermissionDeniedError):
        return ErrorInfo(403, "permission_error", str(exc), param=exc.param, code="permission_denied")
    if isinstance(exc, RateLimitedError):
        return ErrorInfo(
            429,
            exc.limit,
            str(exc),
            code="rate_limit_exceeded",
            headers=retry_after_header(exc.retry_after),
        )
    if isinstance(exc, UnknownRequestError):
        return ErrorInfo(404, "invalid_request_error", str(exc), param="request_id", code="request_not_found")
    if isinstance(exc, ConflictError):
        return ErrorInfo(409, "invalid_request_error", str(exc), code="conflict")
    if isinstance(exc, UnknownWorkerError):
        return ErrorInfo(404, "invalid_request_error", str(exc), param="name", code="worker_not_found")
    if isinstance(exc, NotEnabledError):
        return ErrorInfo(404, "invalid_request_error", str(exc), code="not_enabled")
    logger.error("unexpected error in the gateway", exc_info=exc)
    return ErrorInfo(500, "server_error", f"internal gateway error: {type(exc).__name__}")


REPLICA_LOST = ErrorInfo(
    502,
    "server_error",
    "The replica serving this stream stopped answering before the stream finished.",
    code="replica_lost",
)
"""The error event that ends a stream whose replica died or stalled after the first byte went out."""
