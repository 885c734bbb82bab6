"""The prompt's token ids, for a routing policy that keys on tokens (`RoutingPolicy.needs_tokens`).

The gateway has no tokenizer or chat template of its own (it loads no model): it asks a replica of the pool,
through vLLM's `POST /tokenize` that Switchyard serves too, to count the prompt exactly as it will. That costs a
round trip, paid only by pools whose policy needs tokens; when it fails, the policy gets None and routes by the
text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import httpx

from switchyard.fleet.replica import Replica

logger = logging.getLogger(__name__)


def tokenize_body(body: Mapping[str, Any], endpoint: str) -> dict[str, Any] | None:
    """The /tokenize request for a request body, or None when the prompt is not text to count."""
    model = body.get("model")
    if endpoint == "chat" and isinstance(body.get("messages"), list):
        request: dict[str, Any] = {"model": model, "messages": body["messages"]}
        for key in ("tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message"):
            if key in body:
                request[key] = body[key]
        return request
    if endpoint == "completions" and isinstance(body.get("prompt"), str):
        return {"model": model, "prompt": body["prompt"]}
    if endpoint == "responses" and isinstance(body.get("input"), str):
        messages = [{"role": "user", "content": body["input"]}]
        if isinstance(body.get("instructions"), str):
            messages.insert(0, {"role": "system", "content": body["instructions"]})
        return {"model": model, "messages": messages}
    return None


def given_token_ids(body: Mapping[str, Any]) -> tuple[int, ...] | None:
    """A completion prompt given as token ids already."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return tuple(prompt)
    return None


async def prompt_token_ids(
    client: httpx.AsyncClient,
    replica: Replica,
    body: Mapping[str, Any],
    endpoint: str,
    headers: Mapping[str, str],
    timeout: float,
) -> tuple[int, ...] | None:
    """The prompt's token ids as `replica` counts them, or None (not countable, or the replica failed)."""
    given = given_token_ids(body)
    if given is not None:
        return given
    request = tokenize_body(body, endpoint)
    if request is None:
        return None
    try:
        response = await client.post(
            f"{replica.url}/tokenize", json=request, headers=dict(headers), timeout=timeout
        )
        tokens = response.json().get("tokens") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        logger.debug("tokenize on %s failed: %s", replica.name, exc)
        return None
    if isinstance(tokens, list) and all(type(t) is int for t in tokens):
        return tuple(tokens)
    return None
