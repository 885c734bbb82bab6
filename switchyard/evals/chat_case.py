"""A chat case: one chat completion request, its reply read into an `Outcome`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import openai

from switchyard.evals.endpoint import Prices
from switchyard.evals.outcome import Outcome, ToolCall
from switchyard.evals.suite import ChatCase

REQUEST_FIELDS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "response_format",
        "tool_choice",
        "parallel_tool_calls",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "n",
        "reasoning_effort",
    }
)
"""Parameters the openai client takes by name; any other a case gives travels in `extra_body` (top_k, ...)."""


def api_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the API wants them: tool call arguments as JSON text, even where a suite wrote objects."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_with_text_arguments(c) for c in calls]}
        out.append(message)
    return out


def _with_text_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function", {})
    arguments = function.get("arguments", "")
    if isinstance(arguments, str):
        return call
    return {**call, "function": {**function, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def request_kwargs(params: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in params.items() if k in REQUEST_FIELDS}
    extra = {k: v for k, v in params.items() if k not in REQUEST_FIELDS}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


async def run_chat_case(
    case: ChatCase, client: openai.AsyncOpenAI, model: str, params: Mapping[str, Any], prices: Prices
) -> Outcome:
    kwargs = request_kwargs(params)
    if case.tools:
        kwargs["tools"] = case.tools
    started = time.perf_counter()
    reply = await client.chat.completions.create(model=model, messages=api_messages(case.messages), **kwargs)
    latency = time.perf_counter() - started
    choice = reply.choices[0]
    calls = tuple(
        ToolCall(c.function.name, c.function.arguments or "")
        for c in choice.message.tool_calls or []
        if c.type == "function"
    )
    usage = reply.usage
    input_tokens = usage.prompt_tokens if usage else 0
    output_tokens = usage.completion_tokens if usage else 0
    return Outcome(
        content=choice.message.content or "",
        tool_calls=calls,
        # a reply cut off at max_tokens inside a call is no call a client could run
        malformed_calls=bool(calls) and choice.finish_reason == "length",
        finish_reason=choice.finish_reason,
        prompt=case.prompt,
        latency_s=latency,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=prices.cost(input_tokens, output_tokens),
    )
