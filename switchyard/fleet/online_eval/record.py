"""One logged exchange: a request, the answer it got, and what it cost."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.fleet.usage import TokenUsage


@dataclass(frozen=True)
class LoggedExchange:
    request_id: str
    tenant: str
    pool: str
    endpoint: str
    request: str
    """The request body as the client sent it."""
    response: str
    """The answer's body; for a stream, the text reassembled from its events (stream_text.py)."""
    status: int
    latency: float
    """Seconds from admission to the answer's end."""
    usage: TokenUsage
    cost: float
    created: float
    """Unix seconds."""
    shadow: bool = False
    """A copy answered by a shadow pool, beside the primary's answer of the same request id."""
