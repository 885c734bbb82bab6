"""The bodies a cascade sends to its tiers, and the answer it gives the client.

A judged tier (every tier but the last) is asked without streaming and with logprobs, whatever the client
asked: the decision needs the whole answer and its tokens' logprobs. The kept answer names the model that
answered (`model`), counts every tier's tokens in its `usage`, and carries logprobs only if the client asked
for them. A kept answer to a streamed request is replayed as the events a replica would have sent (one
content event per choice, then its finish, the usage chunk if the client asked, `[DONE]`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from switchyard.fleet.usage import TokenUsage


def asked_logprobs(body: Mapping[str, Any], endpoint: str) -> bool:
    """The client wants logprobs in its answer (chat: `logprobs: true`; completions: `logprobs: N`)."""
    value = body.get("logprobs")
    if endpoint == "chat":
        return value is True
    return isinstance(value, int) and not isinstance(value, bool)


def asked_usage_chunk(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, Mapping) and options.get("include_usage") is True


def tier_body(body: Mapping[str, Any], endpoint: str, tier: str, judged: bool) -> bytes:
    """The client's request for one tier: its model, and for a judged tier no stream and logprobs on."""
    fields: dict[str, Any] = {**body, "model": tier}
    if judged:
        fields.pop("stream", None)
        fields.pop("stream_options", None)
        if not asked_logprobs(body, endpoint):
            fields["logprobs"] = True if endpoint == "chat" else 0
    return json.dumps(fields, ensure_ascii=False).encode()


def kept_answer(
    answer: dict[str, Any], model: str, earlier: TokenUsage, keep_logprobs: bool
) -> dict[str, Any]:
    """A tier's answer as the client gets it: the answering model's name, the earlier tiers' tokens added to
    its usage, and its logprobs removed unless the client asked."""
    kept = {**answer, "model": model}
    usage = kept.get("usage")
    if isinstance(usage, Mapping):
        kept["usage"] = with_earlier_usage(usage, earlier)
    if not keep_logprobs and isinstance(kept.get("choices"), list):
        kept["choices"] = [
            {**choice, "logprobs": None} if isinstance(choice, Mapping) else choice
            for choice in kept["choices"]
        ]
    return kept


def with_earlier_usage(usage: Mapping[str, Any], earlier: TokenUsage) -> dict[str, Any]:
    """`usage` (chat or completions fields) with the earlier tiers' tokens added."""
    summed = dict(usage)
    for field, extra in (
        ("prompt_tokens", earlier.prompt_tokens),
        ("completion_tokens", earlier.output_tokens),
        ("total_tokens", earlier.total_tokens),
    ):
        value = summed.get(field)
        summed[field] = (value if isinstance(value, int) else 0) + extra
    details = summed.get("prompt_tokens_details")
    if isinstance(details, Mapping) or earlier.cached_tokens:
        details = dict(details) if isinstance(details, Mapping) else {}
        cached = details.get("cached_tokens")
        details["cached_tokens"] = (cached if isinstance(cached, int) else 0) + earlier.cached_tokens
        summed["prompt_tokens_details"] = details
    return summed


def answer_events(answer: Mapping[str, Any], endpoint: str, include_usage: bool) -> bytes:
    """A whole chat completion or completion as the server-sent events of a stream."""
    chunk_object = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
    base = {key: answer[key] for key in ("id", "created", "model", "system_fingerprint") if key in answer}
    base["object"] = chunk_object
    events = []
    choices = answer.get("choices") if isinstance(answer.get("choices"), list) else []
    for choice in choices:
        if not isinstance(choice, Mapping):
            continue
        index = choice.get("index", 0)
        logprobs = choice.get("logprobs")
        if endpoint == "chat":
            events += _chat_choice_chunks(base, index, choice, logprobs)
        else:
            text = {
                "index": index,
                "text": choice.get("text", ""),
                "logprobs": logprobs,
                "finish_reason": None,
            }
            end = {"index": index, "text": "", "logprobs": None, "finish_reason": choice.get("finish_reason")}
            events += [{**base, "choices": [text]}, {**base, "choices": [end]}]
    if include_usage and isinstance(answer.get("usage"), Mapping):
        events.append({**base, "choices": [], "usage": answer["usage"]})
    lines = [f"data: {json.dumps(event, ensure_ascii=False)}\n\n" for event in events]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def _chat_choice_chunks(
    base: Mapping[str, Any], index: Any, choice: Mapping[str, Any], logprobs: Any
) -> list[dict[str, Any]]:
    message = choice.get("message") if isinstance(choice.get("message"), Mapping) else {}
    delta: dict[str, Any] = {"role": message.get("role", "assistant"), "content": message.get("content")}
    for field in ("reasoning_content", "refusal"):
        if message.get(field) is not None:
            delta[field] = message[field]
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        delta["tool_calls"] = [
            {**call, "index": position} for position, call in enumerate(calls) if isinstance(call, Mapping)
        ]
    first = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}
    end = {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice.get("finish_reason")}
    return [{**base, "choices": [first]}, {**base, "choices": [end]}]
