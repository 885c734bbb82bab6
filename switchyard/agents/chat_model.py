"""The chat model memory and RAG call (to summarise, answer, judge): any OpenAI-compatible endpoint.

Agents are clients of the OpenAI API (they never reach into the engine), so a summariser or judge can be a
smaller model on another server than the one answering.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from switchyard.agents.model import ModelUsage
from switchyard.errors import SwitchyardError

Message = dict[str, Any]


@dataclass(frozen=True)
class ChatReply:
    """A reply with what it cost, so a run's token and cost limits can count calls made on its behalf
    (summaries of its history, for one)."""

    text: str
    usage: ModelUsage | None = None
    """None when the endpoint reported none."""
    model: str | None = None
    """The model that answered, for pricing; None prices it as the agent's own model."""


ChatFn = Callable[[Sequence[Message]], "str | ChatReply | Awaitable[str | ChatReply]"]
"""Messages in, the reply out (its text, or a ChatReply with usage); sync or async."""


def reply_text(reply: str | ChatReply) -> str:
    """The text of what a ChatFn returned, whichever form."""
    return reply.text if isinstance(reply, ChatReply) else str(reply)


T = TypeVar("T")


class ChatModelError(SwitchyardError):
    """The chat endpoint failed or answered something that is not a chat completion."""


async def maybe_await(value: T | Awaitable[T]) -> T:
    """Await `value` when a callable returned an awaitable; lets callers accept sync or async callables."""
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass
class OpenAIChatModel:
    """Calls `POST {base_url}/chat/completions` and returns the first choice's text."""

    base_url: str
    """e.g. http://127.0.0.1:8000/v1 (Switchyard's server or any OpenAI-compatible one)."""
    model: str
    api_key: str | None = None
    max_tokens: int = 512
    temperature: float = 0.0
    timeout: float = 120.0
    transport: httpx.AsyncBaseTransport | None = None
    """Only for tests (httpx.MockTransport); None uses the network."""

    async def __call__(self, messages: Sequence[Message]) -> ChatReply:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = {
            "model": self.model,
            "messages": list(messages),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        url = self.base_url.rstrip("/") + "/chat/completions"
        try:
            async with httpx.AsyncClient(timeout=self.timeout, transport=self.transport) as client:
                response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as error:
            raise ChatModelError(f"{url}: {type(error).__name__}: {error}") from error
        if response.status_code != 200:
            raise ChatModelError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
        try:
            payload = response.json()
            text = str(payload["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise ChatModelError(f"{url}: not a chat completion: {response.text[:300]}") from error
        return ChatReply(text, _usage(payload.get("usage")), self.model)


def _usage(reported: Any) -> ModelUsage | None:
    """A chat completion's `usage`, when it is well formed."""
    if not isinstance(reported, dict):
        return None
    prompt, completion = reported.get("prompt_tokens"), reported.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return ModelUsage(input_tokens=prompt, output_tokens=completion)
