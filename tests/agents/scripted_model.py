"""A scripted model for agent tests: deterministic replies chosen by how many assistant turns came before.

Choosing by the transcript (not by a call counter) keeps the script right across a crash and a resume in
another process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from switchyard.agents.model import DeltaCallback, ModelRequest, ModelResponse, ModelUsage, ToolCallRequest

Reply = ModelResponse | Callable[[ModelRequest], ModelResponse]


def say(text: str, input_tokens: int = 10, output_tokens: int = 5) -> ModelResponse:
    return ModelResponse(text, [], ModelUsage(input_tokens, output_tokens), "stop")


def call(
    name: str, arguments: dict[str, Any] | str, call_id: str | None = None, **usage: int
) -> ModelResponse:
    return calls((name, arguments, call_id), **usage)


def calls(
    *items: tuple[str, dict[str, Any] | str, str | None], input_tokens: int = 10, output_tokens: int = 5
) -> ModelResponse:
    requests = [
        ToolCallRequest(
            call_id or f"call_{name}_{index}",
            name,
            arguments if isinstance(arguments, str) else json.dumps(arguments),
        )
        for index, (name, arguments, call_id) in enumerate(items)
    ]
    return ModelResponse(None, requests, ModelUsage(input_tokens, output_tokens), "tool_calls")


@dataclass
class ScriptedModel:
    replies: list[Reply]
    repeat_last: bool = False
    """Past the script's end, keep giving the last reply (for loops and limits)."""
    requests: list[ModelRequest] = field(default_factory=list)

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelResponse:
        self.requests.append(request)
        index = sum(1 for m in request.messages if m["role"] == "assistant")
        if index >= len(self.replies):
            if not self.repeat_last:
                raise AssertionError(
                    f"script has {len(self.replies)} replies; turn {index} asked for another"
                )
            index = len(self.replies) - 1
        reply = self.replies[index]
        response = reply(request) if callable(reply) else reply
        if on_delta is not None and response.content:
            for word in response.content.split(" "):
                on_delta(word + " ")
        return response
