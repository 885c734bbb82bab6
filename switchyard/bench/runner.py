"""Runs one benchmark: sessions arrive on the load shape's schedule, each turn streams, results go to JSONL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
from tqdm.auto import tqdm

from switchyard.bench.client import RequestResult, Target, send_request
from switchyard.bench.load import LoadShape, arrival_times
from switchyard.bench.workloads import Session


@dataclass(frozen=True)
class RunResult:
    results: list[RequestResult]
    """In completion order."""
    duration: float
    """Seconds from the first arrival's scheduled time to the last completion."""
    shape: LoadShape


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
) -> RunResult:
    """Send every session's turns; returns once all have finished (each success or a recorded error)."""
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

    async def one_session(number: int, session: Session) -> None:
        await asyncio.sleep(max(0.0, start + float(arrivals[number]) - time.perf_counter()))
        history: list[dict[str, Any]] = []
        for turn_number, turn in enumerate(session.turns):
            result = RequestResult(index=next(counter), session=number, turn=turn_number, start=0.0)
            async with slots or contextlib.nullcontext():
                await send_request(client, target, turn, history, result, start)
            results.append(result)
            if out:
                out.write(json.dumps(result.to_json()) + "\n")
                out.flush()
            bar.update()
            if not result.ok:
                break  # the session cannot go on without this turn's reply
            history = [*history, *turn.messages, {"role": "assistant", "content": result.output_text}]

    try:
        await asyncio.gather(*(one_session(i, s) for i, s in enumerate(sessions)))
    finally:
        bar.close()
        if out:
            out.close()
    return RunResult(results=results, duration=time.perf_counter() - start, shape=shape)
