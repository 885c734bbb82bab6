"""Counts the tokens of an answer as it passes through the gateway, for limits, usage, the ledger's settlement
and the response cache.

A stream's output tokens are counted as its events go by (one per choice per event that carries text or a
tool call: a Switchyard replica sends one event per generated token), so a stream cut off half-way is charged
for what was sent. When the replica reports usage (a body's `usage`, a stream's last chunk, the Responses
API's `response.completed`), its numbers replace the count. To have that report for every chat and
completions stream, the gateway asks for it (`stream_options.include_usage`) and, when the client had not,
drops the usage-only chunk before it reaches the client.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from switchyard.fleet import json_codec
from switchyard.fleet.usage import TokenUsage, token_usage

_DONE = b"[DONE]"


class UsageMeter:
    def __init__(
        self,
        on_output_tokens: Callable[[int], None] = lambda _: None,
        drop_usage_chunk: bool = False,
        record_up_to: int = 0,
    ) -> None:
        """`on_output_tokens` hears each event's count as it passes; `drop_usage_chunk` removes the chunk
        with no choices and only usage; `record_up_to` keeps that many bytes of what passed (0: nothing),
        for the response cache."""
        self._on_output_tokens = on_output_tokens
        self._drop_usage_chunk = drop_usage_chunk
        self._record_limit = record_up_to
        self._recorded: list[bytes] = []
        self._recorded_bytes = 0
        self.counted_output_tokens = 0
        self.reported: TokenUsage | None = None
        """The replica's own report, once seen."""

    def observe_events(self, events: bytes) -> bytes:
        """Count complete SSE events (one or more); what to pass on to the client."""
        kept: list[bytes] = []
        output = 0
        for event in _split_events(events):
            payload = _payload(event)
            if payload is not None:
                usage = token_usage(payload) if b'"usage"' in event else None
                if usage is not None:
                    self.reported = usage
                    if self._drop_usage_chunk and payload.get("choices") == []:
                        continue
                output += _output_tokens(payload)
            kept.append(event)
        if output:
            self.counted_output_tokens += output
            self._on_output_tokens(output)
        passed = b"".join(kept)
        self._record(passed)
        return passed

    def observe_body(self, body: bytes) -> None:
        """Read a whole (non-streamed) answer's usage."""
        try:
            self.reported = token_usage(json_codec.loads(body))
        except (UnicodeDecodeError, json.JSONDecodeError):
            self.reported = None
        self._record(body)

    def usage(self, prompt_estimate: int) -> TokenUsage:
        """The replica's report, else the estimated prompt and the output counted so far."""
        if self.reported is not None:
            return self.reported
        return TokenUsage(prompt_tokens=prompt_estimate, output_tokens=self.counted_output_tokens)

    @property
    def recorded(self) -> bytes | None:
        """Everything that passed, or None when recording was off or it outgrew its bound."""
        if not self._record_limit or self._recorded_bytes > self._record_limit:
            return None
        return b"".join(self._recorded)

    def _record(self, data: bytes) -> None:
        if self._record_limit and self._recorded_bytes <= self._record_limit:
            self._recorded.append(data)
            self._recorded_bytes += len(data)


def _split_events(events: bytes) -> list[bytes]:
    """Each event with its terminating blank line (the last may lack one: a stream's unterminated rest)."""
    parts = (events.replace(b"\r\n", b"\n") if b"\r" in events else events).split(b"\n\n")
    framed = [part + b"\n\n" for part in parts[:-1] if part]
    return [*framed, parts[-1]] if parts[-1] else framed


def _payload(event: bytes) -> dict[str, Any] | None:
    if event.startswith(b"data:") and event.count(b"\n") <= 2:  # the common case: one data line, no name
        data = event[5:].strip()
    else:
        data = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
    if not data or data == _DONE:
        return None
    try:
        payload = json_codec.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def _output_tokens(payload: dict[str, Any]) -> int:
    """Tokens an event carries: one per choice with text, reasoning or tool calls; one per Responses delta."""
    kind = payload.get("type")
    if isinstance(kind, str):
        return 1 if kind.endswith(".delta") else 0
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return 0
    count = 0
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        carrier = delta if isinstance(delta, dict) else choice
        if any(carrier.get(field) for field in ("text", "content", "reasoning_content", "tool_calls")):
            count += 1
    return count
