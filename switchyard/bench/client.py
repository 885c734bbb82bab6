"""One streaming request to an OpenAI-compatible endpoint, timed chunk by chunk (httpx over SSE).

TTFT is taken at the first chunk that carries output (text, reasoning or a tool-call delta), not at the chat
API's opening role chunk; ITLs are the gaps between output chunks. Output tokens come from the final `usage`
(`stream_options.include_usage`) when the server sends it, else from the output text with `--tokenizer`, else
one per output chunk (an undercount for servers that send several tokens a chunk; the summary says so).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from switchyard.bench.workloads import Turn
from switchyard.extras import require_extra

with require_extra("bench"):
    import httpx

CANCELLED = "cancelled"
"""The error of a request still in flight when the run was interrupted: the client's doing, not the server's."""


class EndpointError(RuntimeError):
    """The endpoint cannot be used at all (unreachable, no models, refuses the key)."""


@dataclass(frozen=True)
class Target:
    """Where and how to send requests."""

    base_url: str
    """Up to and including /v1."""
    model: str
    api: str = "completions"
    api_key: str | None = None
    ignore_eos: bool = False
    """Send vLLM's `ignore_eos` (Switchyard and vLLM honour it) so outputs run to max_tokens."""
    temperature: float = 0.0
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"{self.base_url}/{'chat/completions' if self.api == 'chat' else 'completions'}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass
class RequestResult:
    """One request as the client saw it. Times are seconds; `start` is since the run began."""

    index: int
    session: int
    turn: int
    start: float
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    e2e: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    output_token_source: str = "usage"
    """How output_tokens was counted: "usage" (the server's), "tokenizer" (the output text, `--tokenizer`) or
    "chunks" (one per output chunk: the server sent no usage and no tokenizer was given)."""
    output_chunks: int = 0
    cached_tokens: int | None = None
    error: str | None = None
    """None on success, else its type: http_<status>, timeout, connection, stream_error, bad_response, or
    cancelled (in flight when the run was interrupted)."""
    error_message: str | None = None
    output_text: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if self.ttft is None or self.e2e is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        record.pop("output_text")
        record["tpot"] = self.tpot
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> RequestResult:
        fields = {k: v for k, v in record.items() if k in cls.__dataclass_fields__}
        return cls(**fields)


def request_body(target: Target, turn: Turn, history: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": turn.max_tokens,
        "temperature": target.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if target.api == "chat":
        body["messages"] = [*history, *turn.messages]
        if turn.tools:
            body["tools"] = list(turn.tools)
            body["tool_choice"] = "auto"
    else:
        body["prompt"] = turn.prompt
    if turn.user is not None:
        body["user"] = turn.user
    if target.ignore_eos:
        body["ignore_eos"] = True
    return {**body, **target.extra_body}


def _output_piece(choice: dict[str, Any]) -> str | None:
    """The output a chunk's choice carries: text/content/reasoning, or a tool call's name and arguments."""
    if "text" in choice:
        return choice["text"] or None
    delta = choice.get("delta") or {}
    parts = [delta.get("content") or "", delta.get("reasoning_content") or delta.get("reasoning") or ""]
    for call in delta.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append((function.get("name") or "") + (function.get("arguments") or ""))
    if delta.get("tool_calls"):
        return "".join(parts) or " "  # a tool-call delta is output even when its fields are empty
    return "".join(parts) or None


TokenCounter = Callable[[str], int]
"""Tokens in an output text, by the model's tokenizer."""


def count_output_tokens(result: RequestResult, count_tokens: TokenCounter | None) -> None:
    """Fill output_tokens when the server's usage did not: from the text with a tokenizer, else by chunk."""
    if result.output_tokens:
        result.output_token_source = "usage"
    elif count_tokens is not None and result.output_text:
        result.output_tokens = count_tokens(result.output_text)
        result.output_token_source = "tokenizer"
    else:
        result.output_tokens = result.output_chunks
        result.output_token_source = "chunks"


async def send_request(
    client: httpx.AsyncClient,
    target: Target,
    turn: Turn,
    history: list[dict[str, Any]],
    result: RequestResult,
    run_start: float,
    count_tokens: TokenCounter | None = None,
) -> RequestResult:
    """Stream one request into `result` (filled in place so a cancelled run still records what arrived)."""
    start = time.perf_counter()
    result.start = start - run_start
    last = start
    try:
        async with client.stream(
            "POST", target.url, json=request_body(target, turn, history), headers=target.headers
        ) as response:
            if response.status_code != 200:
                raw = await response.aread()
                result.error = f"http_{response.status_code}"
                result.error_message = _error_message(raw)
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                event = json.loads(data)
                if event.get("error"):
                    result.error = "stream_error"
                    result.error_message = _error_message(data.encode())
                    break
                if usage := event.get("usage"):
                    result.prompt_tokens = usage.get("prompt_tokens")
                    result.output_tokens = usage.get("completion_tokens") or 0
                    details = usage.get("prompt_tokens_details") or {}
                    result.cached_tokens = details.get("cached_tokens")
                for choice in event.get("choices") or ():
                    piece = _output_piece(choice)
                    if piece is None:
                        continue
                    if result.ttft is None:
                        result.ttft = now - start
                    else:
                        result.itl.append(now - last)
                    last = now
                    result.output_text += piece
                    result.output_chunks += 1
    except httpx.TimeoutException as exc:
        result.error, result.error_message = "timeout", str(exc) or type(exc).__name__
    except httpx.TransportError as exc:
        result.error, result.error_message = "connection", str(exc) or type(exc).__name__
    except (json.JSONDecodeError, AttributeError, TypeError) as exc:
        result.error, result.error_message = "bad_response", str(exc)
    result.e2e = time.perf_counter() - start
    count_output_tokens(result, count_tokens)
    return result


def _error_message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode(errors="replace")[:500]
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message", error))[:500]
    return str(error)[:500]


async def resolve_model(
    client: httpx.AsyncClient, base_url: str, api_key: str | None, model: str | None
) -> str:
    """Check the endpoint answers; without `model`, the first model it lists. Raises EndpointError."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = await client.get(f"{base_url}/models", headers=headers)
    except httpx.HTTPError as exc:
        raise EndpointError(f"cannot reach {base_url}: {exc or type(exc).__name__}") from None
    if response.status_code in (401, 403):
        raise EndpointError(f"{base_url} refused the API key ({response.status_code}); pass --api-key")
    if model is not None:
        return model
    if response.status_code != 200:
        raise EndpointError(f"{base_url}/models answered {response.status_code}; pass --model")
    models = [m.get("id") for m in response.json().get("data", [])]
    if not models:
        raise EndpointError(f"{base_url}/models lists no model; pass --model")
    return str(models[0])
