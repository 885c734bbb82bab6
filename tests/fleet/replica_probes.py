"""What the launcher tests ask of a replica: is it serving (as the gateway's health checker would tell), does it
answer a completion through the official client, and which `switchyard serve` processes are still alive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import psutil

from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.replicas.base import ReplicaSpec

TINY_SERVE_ARGS = (
    *("--device", "cpu", "--dtype", "float32", "--max-model-len", "256"),
    *("--kv-cache-memory", str(8 << 20), "--shutdown-grace", "5"),
)
"""A tiny model's `switchyard serve` flags: starts in seconds on a CPU."""


def tiny_spec(model_dir: Path, count: int, threads: int | None = 1) -> ReplicaSpec:
    return ReplicaSpec(
        model=str(model_dir), served_name="tiny", count=count, serve_args=TINY_SERVE_ARGS, threads=threads
    )


async def eventually(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


async def wait_until_serving(replica: Replica, timeout: float = 90.0) -> None:
    """Poll /health until it answers 200, then mark the replica HEALTHY (the gateway's health checker's job)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2.0) as client:
        while True:
            try:
                if (await client.get(f"{replica.url}/health")).status_code == 200:
                    replica.health = ReplicaHealth.HEALTHY
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{replica.name} did not come up at {replica.url}"
            await asyncio.sleep(0.1)


async def complete(replica: Replica) -> str:
    """A completion from the replica through the official client; returns the model name it answered as."""
    client = openai.AsyncOpenAI(base_url=f"{replica.url}/v1", api_key="unused", max_retries=0, timeout=30)
    async with client:
        answer = await client.completions.create(model=replica.model, prompt="Hello", max_tokens=3)
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    return answer.model


def serve_processes(model_dir: Path) -> list[psutil.Process]:
    """Live `switchyard serve` processes of this model folder (a test's own: its folder is a fresh temp dir)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        command = process.info["cmdline"] or []
        alive = process.info["status"] != psutil.STATUS_ZOMBIE
        if alive and "switchyard.cli" in command and "serve" in command and str(model_dir) in command:
            found.append(process)
    return found
