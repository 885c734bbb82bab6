"""The chat model memory and RAG call (to summarise, answer, judge): any OpenAI-compatible endpoint.

Agents are clients of the OpenAI API (they never reach into the engine), so a summariser or judge can be a
smaller model on another server than the one answering.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from switchyard.agents.model import ModelUsage, openai_client, usage_of
from switchyard.errors import SwitchyardError
from switchyard.extras import require_extra

if TYPE_CHECKING:
    import httpx

with require_extra("agents"):
    import openai

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
    """Calls `POST {base_url}/chat/completions` through the official `openai` client (as `OpenAIModelClient`
    does) and returns the first choice's text; any failure is a ChatModelError naming the URL."""

    base_url: str
    """e.g. http://127.0.0.1:8000/v1 (Switchyard's server or any OpenAI-compatible one)."""
    model: str
    api_key: str | None = None
    """Sent as a bearer token; None sends a placeholder (servers without a key ignore it)."""
    max_tokens: int = 512
    temperature: float = 0.0
    timeout: float = 120.0
    http_client: httpx.AsyncClient | None = None
    """Only for tests (an httpx.AsyncClient over a MockTransport); None opens a client per call."""

    async def __call__(self, messages: Sequence[Message]) -> ChatReply:
        url = self.base_url.rstrip("/") + "/chat/completions"
        # A client per call, as its connections belong to the event loop that opened them.
        client = openai_client(self.base_url, self.api_key or "unused", self.timeout, self.http_client)
        try:
            reply: Any = await client.chat.completions.create(
                model=self.model,
                messages=list(messages),  # type: ignore[arg-type]
                max_tokens=self.max_tokens,
                temperature=self.temperature,
            )
        except openai.APIStatusError as error:
            raise ChatModelError(f"{url}: HTTP {error.status_code}: {error.response.text[:300]}") from error
        except openai.APIError as error:  # no connection, a timeout
            cause = error.__cause__ or error
            raise ChatModelError(f"{url}: {type(cause).__name__}: {cause}") from error
        finally:
            if self.http_client is None:
                await client.close()
        try:
            text = str(reply.choices[0].message.content or "")
        except (AttributeError, IndexError, TypeError) as error:  # the client keeps any JSON it is given
            raise ChatModelError(f"{url}: not a chat completion: {str(reply)[:300]}") from error
        return ChatReply(text, usage_of(reply.usage), self.model)
