"""An error as the OpenAI API answers it: status, `{"error": {message, type, param, code}}` body, headers, and
the same body as a stream event. One shape for the server and the fleet gateway (torch-free)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ErrorInfo:
    status: int
    type: str
    message: str
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def sse_event(self, name: str | None = None) -> str:
        """The error as a stream event (`event: <name>` first when named, as in the Responses API); the OpenAI
        client raises APIError with its message on either."""
        data = f"data: {json.dumps(self.body(), ensure_ascii=False)}\n\n"
        return data if name is None else f"event: {name}\n{data}"


def retry_after_header(seconds: float) -> dict[str, str]:
    """Retry-After in whole seconds, at least 1."""
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


def invalid_api_key(message: str) -> ErrorInfo:
    """401 for a missing or wrong key, with the challenge header HTTP asks for."""
    return ErrorInfo(
        401, "invalid_request_error", message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
    )


def model_not_found(message: str) -> ErrorInfo:
    return ErrorInfo(404, "invalid_request_error", message, param="model", code="model_not_found")
