"""What the runner holds while it drives one run: the state, the limits, the clock, the event sink, the store.

None of it is persisted but the state: it is rebuilt on every `Runner.run` and `Runner.resume`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from switchyard.agents.checkpoint import CheckpointStore
from switchyard.agents.events import EventSink
from switchyard.agents.limits import RunLimits
from switchyard.agents.state import RunState

T = TypeVar("T")


class RunTimeoutReached(Exception):
    """The run's wall-clock limit passed while the runner awaited something; the run ends with TIMEOUT."""


@dataclass
class RunClock:
    """Wall-clock seconds of work in this run, summed across the processes that worked on it."""

    base: float
    start: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return self.base + time.monotonic() - self.start


@dataclass
class ActiveRun:
    """One run being driven: every step goes through `save`, every await of outside work through `bounded`."""

    state: RunState
    limits: RunLimits
    clock: RunClock
    emit: EventSink
    store: CheckpointStore | None

    def save(self, kind: str, payload: str) -> None:
        """Commit the state after one step (with its elapsed time) before anything else happens."""
        self.state.elapsed_s = self.clock.elapsed()
        if self.store is not None:
            self.store.save(self.state, kind, payload)

    async def bounded(self, awaitable: Awaitable[T]) -> T:
        """Await within what is left of the run's timeout; past it, `RunTimeoutReached` (the awaited work is
        cancelled). Errors of the work itself, a tool's own timeout included, pass through unchanged."""
        if self.limits.timeout is None:
            return await awaitable
        remaining = self.limits.timeout - self.clock.elapsed()
        try:
            async with asyncio.timeout(max(remaining, 0.0)) as deadline:
                return await awaitable
        except TimeoutError:
            if deadline.expired():
                raise RunTimeoutReached from None
            raise
