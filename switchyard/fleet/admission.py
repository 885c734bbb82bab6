"""A pool's admission at the edge: straight through while a replica has a free slot, else a bounded FIFO wait.

Each replica takes at most `max_in_flight_per_replica` requests from the gateway; the rest wait here, in
arrival order, so the routing policy still picks among replicas when a slot frees up (late binding). Beyond
`max_queue` waiting requests the gateway sheds load with 429 and a Retry-After estimated from how fast this
queue has been draining. A waiter whose client leaves is cancelled and drops out of the queue.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from switchyard.drain_rate import DrainRate, estimate_retry_after
from switchyard.fleet.errors import QueueFullError


class AdmissionQueue:
    """Admits a pool's requests one slot at a time; `free_slots` counts the slots its routable replicas have."""

    def __init__(
        self,
        pool: str,
        max_queue: int,
        free_slots: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.max_queue = max_queue
        self._free_slots = free_slots
        self._clock = clock
        self.drain_rate = DrainRate(start=clock())
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._reserved = 0
        """Slots promised to woken waiters that have not yet resumed to take them."""

    @property
    def depth(self) -> int:
        """Requests waiting now."""
        return len(self._waiters)

    async def enter(self) -> None:
        """Return when the caller may take a slot; it must then take one before its next await.

        QueueFullError when the queue is full; whatever `fail_waiters` raises when the pool loses its replicas.
        """
        if not self._waiters and self._free_slots() - self._reserved > 0:
            return
        if len(self._waiters) >= self.max_queue:
            now = self._clock()
            raise QueueFullError(self.pool, estimate_retry_after(self.depth, self.drain_rate.per_second(now)))
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._reserved -= 1  # woken, then cancelled before it took the slot: pass the slot on
                self.wake()
            raise
        self._reserved -= 1

    def wake(self) -> None:
        """Let waiters in while slots are free (after a request finished or a replica became routable)."""
        while self._waiters and self._free_slots() - self._reserved > 0:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            waiter.set_result(None)
            self._reserved += 1

    def record_finish(self) -> None:
        """A request left the pool (any outcome): the drain rate behind Retry-After."""
        self.drain_rate.record(self._clock())

    def fail_waiters(self, error: Callable[[], Exception]) -> None:
        """Answer every waiter with a fresh `error()` (the pool has no routable replica left to wait for)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error())
