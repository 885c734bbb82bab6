"""Keeping a replayed history valid: every assistant tool call must be followed by a tool reply.

A run stopped by a limit (turns, tokens, cost, loop, bad calls, time) or paused for approval leaves its last
turn's calls without replies, so that `Runner.resume` can still run them. Its session then ends with such a
turn, and OpenAI-style APIs reject a request whose assistant `tool_calls` lack replies. A new run on that
session therefore gives each unanswered call a fixed reply of the runner's own (which taints nothing); the
session itself is left as it was.
"""

from __future__ import annotations

from typing import Any

STOPPED_BEFORE_RUN = "Not run: the run that made this call stopped before running it."


def answer_unreplied_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with a `STOPPED_BEFORE_RUN` reply after each assistant tool call that has none (placed at
    the end of the tool replies that follow its assistant message)."""
    fixed: list[dict[str, Any]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        fixed.append(message)
        index += 1
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        asked = [c.get("id") for c in message["tool_calls"]]
        answered: set[Any] = set()
        while index < len(messages) and messages[index].get("role") == "tool":
            answered.add(messages[index].get("tool_call_id"))
            fixed.append(messages[index])
            index += 1
        fixed += [
            {"role": "tool", "tool_call_id": call_id, "content": STOPPED_BEFORE_RUN}
            for call_id in asked
            if call_id not in answered
        ]
    return fixed
