"""The launcher interface: start a pool's replicas, keep them running, stop them.

A launcher owns the lifecycle of what it started: it marks a replica DEAD when its process or actor exits,
restarts it with backoff (the same `Replica` object, STARTING again, possibly at a new URL) and tells the pool
through `on_restart`, since a restarted replica's KV cache is empty. Marking a replica HEALTHY is the health
checker's job, which polls /health of every STARTING or EJECTED replica whatever launched it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from switchyard.fleet.replica import Replica


@dataclass(frozen=True)
class ReplicaSpec:
    """What to run: N copies of `switchyard serve MODEL [serve_args]`."""

    model: str
    """The model argument of `switchyard serve` (a bundled name or a model folder)."""
    served_name: str
    """The pool's name: what clients send as `model` (passed on as --served-model-name)."""
    count: int
    serve_args: tuple[str, ...] = ()
    """Further `switchyard serve` flags (engine flags: --dtype, --max-model-len, ...)."""
    threads: int | None = None
    """Torch threads per replica; None splits this machine's cores evenly between the replicas."""


RestartListener = Callable[[Replica], None]


class ReplicaLauncher(ABC):
    @abstractmethod
    async def start(self) -> list[Replica]:
        """Launch every replica and begin supervising them; return them at once (STARTING)."""

    @abstractmethod
    async def stop(self, grace: float) -> None:
        """Stop supervising and stop every replica: SIGTERM (they drain), then kill after `grace` seconds."""

    @property
    @abstractmethod
    def num_restarts(self) -> int:
        """Replicas restarted after a crash since start (a fleet metric)."""
