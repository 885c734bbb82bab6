"""Token usage read from replicas' answers as they pass through: the cached prompt tokens, and the whole usage.

The gateway compares the cached tokens with what the routing policy predicted
(`RouteDecision.predicted_cached_tokens`), so an operator sees whether prefix-aware routing lands where the
caches are; the whole usage (`TokenUsage`) is what tenants' limits, usage reports and costs count. Chat and completions report
`usage.prompt_tokens_details.cached_tokens`; the Responses API reports `usage.input_tokens_details.cached_tokens`
(inside `response` in its stream events). A stream has usage only in its final chunk, and only when the client
asked (`stream_options.include_usage`); then nothing is counted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.fleet import json_codec


def cached_tokens(payload: Any) -> int | None:
    """The cached prompt tokens in a response body or stream event, or None when it reports none."""
    if not isinstance(payload, Mapping):
        return None
    usage = payload.get("usage")
    if not isinstance(usage, Mapping):
        response = payload.get("response")
        usage = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    if not isinstance(details, Mapping):
        return None
    value = details.get("cached_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def cached_tokens_in_body(raw: bytes) -> int | None:
    try:
        return cached_tokens(json_codec.loads(raw))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def cached_tokens_in_events(events: bytes) -> int | None:
    """The last report in complete SSE events; cheap when there is none (a byte search, no parsing)."""
    if b"cached_tokens" not in events:
        return None
    found = None
    for line in events.splitlines():
        if line.startswith(b"data:") and b"cached_tokens" in line:
            value = cached_tokens_in_body(line[5:].strip())
            if value is not None:
                found = value
    return found


@dataclass(frozen=True)
class TokenUsage:
    """Tokens one request (or many, summed) used: what limits, usage reports and the ledger count."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Of the prompt tokens, those the replica found in its prefix cache."""
    output_tokens: int = 0

    def __post_init__(self) -> None:
        counts = (self.prompt_tokens, self.cached_tokens, self.output_tokens)
        if any(isinstance(count, bool) or not isinstance(count, int) or count < 0 for count in counts):
            raise ValueError(f"token counts must be non-negative integers, got {counts}")
        if self.cached_tokens > self.prompt_tokens:
            raise ValueError(
                f"cached_tokens ({self.cached_tokens}) exceeds prompt_tokens ({self.prompt_tokens})"
            )

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.cached_tokens + other.cached_tokens,
            self.output_tokens + other.output_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


def token_usage(payload: Any) -> TokenUsage | None:
    """The usage a response body or stream event reports (chat and completions' prompt/completion tokens, the
    Responses API's input/output tokens, also inside `response`), or None when it reports none."""
    if not isinstance(payload, Mapping):
        return None
    usage = payload.get("usage")
    if not isinstance(usage, Mapping):
        response = payload.get("response")
        usage = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    prompt = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    output = _count(usage.get("completion_tokens", usage.get("output_tokens")))
    if prompt is None or output is None:
        return None
    return TokenUsage(prompt, cached_tokens(payload) or 0, output)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
