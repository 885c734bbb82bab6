"""Runs one benchmark: sessions arrive on the load shape's schedule, each turn streams, results go to JSONL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tqdm.auto import tqdm

from switchyard.bench.client import (
    CANCELLED,
    RequestResult,
    Target,
    TokenCounter,
    count_output_tokens,
    send_request,
)
from switchyard.bench.load import LoadShape, arrival_times
from switchyard.bench.workloads import Session
from switchyard.extras import require_extra

with require_extra("bench"):
    import httpx


@dataclass(frozen=True)
class RunResult:
    results: list[RequestResult]
    """In completion order."""
    duration: float
    """Seconds from the first arrival's scheduled time to the last completion."""
    shape: LoadShape


class RunInterrupted(Exception):
    """The run was cancelled (Ctrl-C) before every session finished.

    `run` keeps what was recorded: every finished request, and each one in flight at that moment with error
    `cancelled` and whatever had streamed in; sessions that had not yet arrived were never sent.
    """

    def __init__(self, run: RunResult) -> None:
        super().__init__(f"interrupted after {len(run.results)} requests")
        self.run = run


def http_client(shape: LoadShape, timeout: float) -> httpx.AsyncClient:
    # Connections are not the bottleneck under test: one per in-flight request.
    limits = httpx.Limits(max_connections=shape.max_concurrency, max_keepalive_connections=None)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))


async def run_load(
    client: httpx.AsyncClient,
    target: Target,
    sessions: list[Session],
    shape: LoadShape,
    *,
    jsonl: Path | None = None,
    progress: bool = True,
    description: str = "requests",
    count_tokens: TokenCounter | None = None,
) -> RunResult:
    """Send every session's turns; returns once all have finished (each success or a recorded error).

    Cancelled (Ctrl-C), it records the requests in flight as `cancelled`, closes the JSONL and raises
    RunInterrupted with the partial run, so the caller can still summarise what finished.
    """
    arrivals = arrival_times(shape, len(sessions))
    slots = asyncio.Semaphore(shape.max_concurrency) if shape.max_concurrency else None
    results: list[RequestResult] = []
    total = sum(len(s.turns) for s in sessions)
    bar = tqdm(
        total=total, desc=description, unit="req", disable=not progress, leave=False, dynamic_ncols=True
    )
    out: IO[str] | None = jsonl.open("w") if jsonl else None
    start = time.perf_counter()
    counter = iter(range(total))

    def record(result: RequestResult) -> None:
        results.append(result)
        if out:
            out.write(json.dumps(result.to_json()) + "\n")
            out.flush()
        bar.update()

    async def one_session(number: int, session: Session) -> None:
        await asyncio.sleep(max(0.0, start + float(arrivals[number]) - time.perf_counter()))
        history: list[dict[str, Any]] = []
        for turn_number, turn in enumerate(session.turns):
            result = RequestResult(index=next(counter), session=number, turn=turn_number, start=0.0)
            async with slots or contextlib.nullcontext():
                try:
                    await send_request(client, target, turn, history, result, start, count_tokens)
                except asyncio.CancelledError:
                    result.error, result.error_message = CANCELLED, "the run was interrupted"
                    count_output_tokens(result, count_tokens)  # what had streamed in
                    record(result)
                    raise
            record(result)
            if not result.ok:
                break  # the session cannot go on without this turn's reply
            history = [*history, *turn.messages, {"role": "assistant", "content": result.output_text}]

    try:
        await asyncio.gather(*(one_session(i, s) for i, s in enumerate(sessions)))
    except asyncio.CancelledError:
        raise RunInterrupted(RunResult(results, time.perf_counter() - start, shape)) from None
    finally:
        bar.close()
        if out:
            out.close()
    return RunResult(results=results, duration=time.perf_counter() - start, shape=shape)
