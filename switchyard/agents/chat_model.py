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

from switchyard.errors import SwitchyardError

Message = dict[str, Any]
ChatFn = Callable[[Sequence[Message]], "str | Awaitable[str]"]
"""Messages in, the reply's text out; sync or async (tests pass a plain function)."""

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

    async def __call__(self, messages: Sequence[Message]) -> str:
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
            return str(response.json()["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise ChatModelError(f"{url}: not a chat completion: {response.text[:300]}") from error
