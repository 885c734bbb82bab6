"""What the gateway reads from a request body: the pool, whether it streams, and what routing keys on.

The body itself is forwarded as the client sent it; only these fields are looked at, and nothing is
validated that the replica will validate anyway (a bad `temperature` is the replica's 400 to give).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.fleet.errors import BadRequestError
from switchyard.fleet.policies import RouteRequest
from switchyard.json_text import lone_surrogate_path

SESSION_HEADER = "x-session-id"
"""The header session affinity keys on when the body has no `user`."""


@dataclass(frozen=True)
class RequestFields:
    model: str
    stream: bool
    route: RouteRequest
    body: Mapping[str, Any]
    """The parsed body (for a policy that needs the prompt's tokens, which asks a replica to count them)."""


def read_request_fields(raw: bytes, endpoint: str, headers: Mapping[str, str]) -> RequestFields:
    """The fields of a /v1/chat/completions, /v1/completions or /v1/responses body (`endpoint` names which);
    BadRequestError for a body that is not a JSON object with a string `model`."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequestError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequestError("request body must be a JSON object")
    bad = lone_surrogate_path(body)  # would fail in routing's prompt hashing, metrics and logs
    if bad is not None:
        raise BadRequestError(
            f"{bad}: the text holds a lone UTF-16 surrogate (\\ud800-\\udfff without its pair)", param=bad
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequestError("`model` is required: the name of the model to use", param="model")
    user = body.get("user")
    session = user if isinstance(user, str) and user else headers.get(SESSION_HEADER) or None
    route = RouteRequest(model=model, text=prompt_text(body, endpoint), session=session)
    return RequestFields(model=model, stream=body.get("stream") is True, route=route, body=body)


def prompt_text(body: Mapping[str, Any], endpoint: str) -> str:
    """The prompt as one text, in order: what prefix-aware routing compares between requests."""
    if endpoint == "chat":
        return _joined(_content_text(message.get("content")) for message in _dicts(body.get("messages")))
    if endpoint == "completions":
        prompt = body.get("prompt")
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt)
        return prompt if isinstance(prompt, str) else ""
    instructions = body.get("instructions")
    parts = [instructions] if isinstance(instructions, str) else []
    items = body.get("input")
    if isinstance(items, str):
        parts.append(items)
    else:
        parts += [_content_text(item.get("content")) for item in _dicts(items)]
    return _joined(parts)


def _content_text(content: Any) -> str:
    """A message's content: a string, or the text of its parts (images and audio have none to compare)."""
    if isinstance(content, str):
        return content
    return _joined(part.get("text") if isinstance(part.get("text"), str) else "" for part in _dicts(content))


def _dicts(items: Any) -> list[dict[str, Any]]:
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _joined(parts: Any) -> str:
    return "\n".join(part for part in parts if part)
