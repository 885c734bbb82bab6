"""The text of a streamed answer, reassembled from its SSE events, so a judge reads what the caller read."""

from __future__ import annotations

import json
from typing import Any


def stream_text(events: bytes) -> str:
    """Chat deltas' content, completions' text, or the Responses API's output_text deltas, in order."""
    parts: list[str] = []
    for line in events.replace(b"\r\n", b"\n").split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            continue
        try:
            payload = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(payload, dict):
            parts.append(_text(payload))
    return "".join(parts)


def _text(payload: dict[str, Any]) -> str:
    if payload.get("type") == "response.output_text.delta":
        delta = payload.get("delta")
        return delta if isinstance(delta, str) else ""
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return text if isinstance(text, str) else ""
