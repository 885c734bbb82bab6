"""How the runtime reaches a model: one protocol, an OpenAI-compatible client, normalised responses.

The runner depends only on `ModelClient`, so the same loop runs against Switchyard's server, any other
OpenAI-compatible endpoint, or a scripted model in tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from switchyard.extras import require_extra

if TYPE_CHECKING:
    import httpx

with require_extra("agents"):
    import openai


@dataclass
class ModelUsage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: ModelUsage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call as the model wrote it; `arguments` is raw text, validated later by the tool."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any] | None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    parallel_tool_calls: bool | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelResponse:
    content: str | None
    tool_calls: list[ToolCallRequest]
    usage: ModelUsage
    finish_reason: str | None = None
    reasoning: str | None = None
    """A reasoning model's thinking, where the endpoint returns it apart (`reasoning_content` or `reasoning`)."""

    @property
    def cut_short(self) -> bool:
        """The reply stopped at a token limit (max_tokens or the server's context), not where the model ended it."""
        return self.finish_reason == "length"


DeltaCallback = Callable[[str], None]


@dataclass(frozen=True)
class StreamCallbacks:
    """What the runner passes as `on_delta`: callable with content text, as any `ModelClient` expects, and with a
    `reasoning` callback that clients which know of reasoning (OpenAIModelClient) call with thinking text."""

    content: DeltaCallback
    reasoning: DeltaCallback

    def __call__(self, text: str) -> None:
        self.content(text)


def usage_of(reported: Any) -> ModelUsage | None:
    """A reply's `usage` as ModelUsage; None when the endpoint reported none, or nothing well formed."""
    prompt = getattr(reported, "prompt_tokens", None)
    completion = getattr(reported, "completion_tokens", None)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return ModelUsage(input_tokens=prompt, output_tokens=completion)


def openai_client(
    base_url: str | None,
    api_key: str,
    timeout: float,
    http_client: httpx.AsyncClient | None = None,
) -> openai.AsyncOpenAI:
    """The official AsyncOpenAI client as the agents use it: no retries (the run's limits decide what to retry),
    `http_client` only for tests (an httpx.AsyncClient over a MockTransport)."""
    return openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, http_client=http_client
    )


class ModelClient(Protocol):
    """Anything that answers a chat request; `on_delta`, when given, receives content text as it arrives."""

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse: ...


class OpenAIModelClient:
    """A `ModelClient` over the official `openai` AsyncOpenAI client (Switchyard's server or any other).

    An async client's pooled connections belong to the event loop that opened them. A client this class built
    itself (from `base_url`) is rebuilt when it is first used on another loop, so each `asyncio.run` (a
    resume on another runner after an approval) gets working connections; a `client` passed in is used as is,
    so keep its calls on one loop (one `Runner`'s sync calls share one)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str = "unused",
        timeout: float = 120.0,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        self._build = lambda: openai_client(base_url, api_key, timeout)
        self._owned = client is None
        self.client = client or self._build()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client_for_this_loop(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._loop is not None and self._owned:
                self.client = self._build()
            self._loop = loop
        return self.client

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelResponse:
        kwargs: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.tools:
            kwargs["tools"] = request.tools
            if request.tool_choice is not None:
                kwargs["tool_choice"] = request.tool_choice
            if request.parallel_tool_calls is not None:
                kwargs["parallel_tool_calls"] = request.parallel_tool_calls
        for name in ("temperature", "top_p", "max_tokens", "seed"):
            if getattr(request, name) is not None:
                kwargs[name] = getattr(request, name)
        if request.extra_body:
            kwargs["extra_body"] = request.extra_body
        if on_delta is None:
            reply = await self._client_for_this_loop().chat.completions.create(**kwargs)
            choice = reply.choices[0]
            calls = [
                ToolCallRequest(c.id, c.function.name, c.function.arguments or "")
                for c in choice.message.tool_calls or []
                if c.type == "function"
            ]
            usage = usage_of(reply.usage) or ModelUsage()
            return ModelResponse(
                choice.message.content, calls, usage, choice.finish_reason, _reasoning_of(choice.message)
            )
        return await self._stream(kwargs, on_delta)

    async def _stream(self, kwargs: dict[str, Any], on_delta: DeltaCallback) -> ModelResponse:
        stream = await self._client_for_this_loop().chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kwargs
        )
        content: list[str] = []
        reasoning: list[str] = []
        on_reasoning = on_delta.reasoning if isinstance(on_delta, StreamCallbacks) else None
        calls: dict[int, dict[str, str]] = {}
        usage = ModelUsage()
        finish = None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = usage_of(chunk.usage) or ModelUsage()
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            if choice.delta.content:
                content.append(choice.delta.content)
                on_delta(choice.delta.content)
            thinking = _reasoning_of(choice.delta)
            if thinking:
                reasoning.append(thinking)
                if on_reasoning is not None:
                    on_reasoning(thinking)
            for piece in choice.delta.tool_calls or []:
                entry = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] = piece.id or entry["id"]
                if piece.function is not None:
                    entry["name"] = piece.function.name or entry["name"]
                    entry["arguments"] += piece.function.arguments or ""
        requests = [ToolCallRequest(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
        return ModelResponse("".join(content) or None, requests, usage, finish, "".join(reasoning) or None)


def _reasoning_of(message: Any) -> str | None:
    """The reasoning text of a message or delta: vLLM's and Switchyard's `reasoning`, or DeepSeek's
    `reasoning_content` (the openai client keeps both as extra fields)."""
    extra = getattr(message, "model_extra", None) or {}
    for name in ("reasoning_content", "reasoning"):
        value = extra.get(name)
        if isinstance(value, str):
            return value
    return None
