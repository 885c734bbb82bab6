"""A soak: many clients for a long time, streaming, disconnecting and sending bad input, against one server.

What a reliability run needs from the client side: every client loops over a seeded mix of request kinds
until the run's time is up, and each outcome is counted by kind. A server passes when no answer was a 5xx,
every bad request got its 4xx, and afterwards nothing is left running (the caller reads the server's KV
blocks and memory; benchmarks/soak.py plots its RSS, tests/server check a short run).

Kinds:
- `stream`: a streamed chat reply read to its end;
- `disconnect`: a streamed reply the client drops after a few chunks (the server must free its KV blocks);
- `abandon`: a non-streamed reply the client gives up on before it comes (a read timeout);
- `complete`: a non-streamed completion;
- `bad`: hostile input (a lone surrogate, Infinity, a negative echoed token id, a prompt far over the context,
  a malformed body), which must get a 400, never a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from switchyard.extras import require_extra

with require_extra("bench"):
    import httpx

KINDS = ("stream", "disconnect", "abandon", "complete", "bad")

BAD_BODIES: tuple[tuple[str, str], ...] = (
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 4}'),
    ("/v1/completions", '{"prompt": "hi", "max_tokens": 4, "temperature": Infinity}'),
    ("/v1/completions", '{"prompt": [-5], "echo": true, "max_tokens": 0, "logprobs": 1}'),
    ("/v1/completions", '{"prompt": "hi", "user": "\\udfff", "max_tokens": 4}'),
    ("/v1/completions", '{"prompt": "hi", "max_tokens": 4'),
    ("/tokenize", '{"prompt": "\\ud800"}'),
)
"""(route, raw body) pairs that must each be a 400."""

HUGE_PROMPT_CHARS = 1 << 20
"""A prompt of 1 MiB of text: over the context of any model served in a soak, refused before tokenizing."""


@dataclass(frozen=True)
class SoakConfig:
    base_url: str
    """The server's root (not /v1)."""
    model: str
    clients: int = 100
    """Clients running at once, each looping until `duration` is up."""
    duration: float = 60.0
    """Seconds the clients keep starting requests."""
    max_tokens: int = 32
    seed: int = 0
    api_key: str | None = None
    weights: dict[str, float] = field(
        default_factory=lambda: {"stream": 4, "disconnect": 3, "abandon": 1, "complete": 1, "bad": 2}
    )
    """How often each kind is drawn."""


@dataclass
class SoakResult:
    outcomes: Counter[str] = field(default_factory=Counter)
    """`kind:outcome` -> count; outcomes are ok, dropped (the client's own disconnect), 4xx statuses as
    `status_NNN`, `status_5xx`, `unexpected_200` (a bad request that was accepted) and `transport_error`."""
    server_errors: list[str] = field(default_factory=list)
    """The first few 5xx bodies and transport errors, for the report."""
    requests: int = 0
    seconds: float = 0.0

    @property
    def num_server_errors(self) -> int:
        return sum(n for key, n in self.outcomes.items() if key.endswith(("status_5xx", "transport_error")))

    @property
    def num_bad_accepted(self) -> int:
        return self.outcomes["bad:unexpected_200"]


async def run_soak(config: SoakConfig) -> SoakResult:
    """Run `config.clients` clients for `config.duration` seconds; the result counts every outcome."""
    result = SoakResult()
    deadline = time.monotonic() + config.duration
    start = time.monotonic()
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    # Idle connections expire on the client first: a server closes them after its keep-alive timeout (uvicorn:
    # 5 s), and a request sent on one at that moment would fail for reasons that are not the server's fault.
    limits = httpx.Limits(
        max_connections=config.clients, max_keepalive_connections=config.clients, keepalive_expiry=2.0
    )
    async with httpx.AsyncClient(
        base_url=config.base_url, headers=headers, timeout=120, limits=limits
    ) as http:
        await asyncio.gather(
            *(_client(http, config, index, deadline, result) for index in range(config.clients))
        )
    result.seconds = time.monotonic() - start
    return result


async def _client(
    http: httpx.AsyncClient, config: SoakConfig, index: int, deadline: float, result: SoakResult
) -> None:
    rng = random.Random(config.seed * 100_003 + index)
    kinds = list(config.weights)
    weights = [config.weights[k] for k in kinds]
    while time.monotonic() < deadline:
        kind = rng.choices(kinds, weights)[0]
        try:
            outcome = await _REQUESTS[kind](http, config, rng)
        except httpx.TransportError as exc:
            outcome = "transport_error"
            _note(result, f"{kind}: {type(exc).__name__}: {exc}")
        except _ServerError as exc:
            outcome = "status_5xx"
            _note(result, f"{kind}: {exc}")
        result.outcomes[f"{kind}:{outcome}"] += 1
        result.requests += 1


class _ServerError(Exception):
    pass


def _note(result: SoakResult, text: str) -> None:
    if len(result.server_errors) < 20:
        result.server_errors.append(text[:500])


def _status(response: httpx.Response) -> str:
    if response.status_code >= 500:
        raise _ServerError(f"{response.status_code}: {response.text[:300]}")
    return "ok" if response.status_code == 200 else f"status_{response.status_code}"


def _chat_body(config: SoakConfig, rng: random.Random, stream: bool) -> dict[str, object]:
    words = " ".join(
        rng.choice(("ship", "harbour", "crane", "tide", "cargo", "rail")) for _ in range(rng.randint(3, 40))
    )
    return {
        "model": config.model,
        "messages": [{"role": "user", "content": f"Tell me about {words}."}],
        "max_tokens": rng.randint(1, config.max_tokens),
        "stream": stream,
        "temperature": rng.choice((0.0, 0.7, 1.0)),
    }


async def _stream(http: httpx.AsyncClient, config: SoakConfig, rng: random.Random) -> str:
    async with http.stream("POST", "/v1/chat/completions", json=_chat_body(config, rng, True)) as response:
        if response.status_code != 200:
            await response.aread()
            return _status(response)
        done = False
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"error"' in line[:20]:
                raise _ServerError(f"error event: {line[:300]}")
            done = done or line == "data: [DONE]"
        return "ok" if done else "transport_error"


async def _disconnect(http: httpx.AsyncClient, config: SoakConfig, rng: random.Random) -> str:
    body = {**_chat_body(config, rng, True), "max_tokens": config.max_tokens}
    keep = rng.randint(1, 4)
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return _status(response)
        seen = 0
        async for line in response.aiter_lines():
            seen += line.startswith("data: ")
            if seen >= keep:
                break  # leaving the block closes the connection mid-stream
    return "dropped"


async def _abandon(http: httpx.AsyncClient, config: SoakConfig, rng: random.Random) -> str:
    body = {**_chat_body(config, rng, False), "max_tokens": config.max_tokens}
    try:
        response = await http.post("/v1/chat/completions", json=body, timeout=rng.uniform(0.01, 0.2))
    except httpx.TimeoutException:
        return "dropped"
    return _status(response)


async def _complete(http: httpx.AsyncClient, config: SoakConfig, rng: random.Random) -> str:
    body = {
        "model": config.model,
        "prompt": "The harbour at dawn",
        "max_tokens": rng.randint(1, config.max_tokens),
    }
    return _status(await http.post("/v1/completions", json=body))


async def _bad(http: httpx.AsyncClient, config: SoakConfig, rng: random.Random) -> str:
    if rng.random() < 0.2:
        path, raw = "/v1/completions", json.dumps({"model": config.model, "prompt": "x" * HUGE_PROMPT_CHARS})
    else:
        path, raw = rng.choice(BAD_BODIES)
    response = await http.post(path, content=raw, headers={"content-type": "application/json"})
    outcome = _status(response)
    return "unexpected_200" if outcome == "ok" else outcome


_REQUESTS = {
    "stream": _stream,
    "disconnect": _disconnect,
    "abandon": _abandon,
    "complete": _complete,
    "bad": _bad,
}
