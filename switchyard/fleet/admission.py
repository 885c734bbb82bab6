"""A pool's admission at the edge: straight through while a replica has a free slot, else a bounded wait that
is fair between tenants.

Each replica takes at most `max_in_flight_per_replica` requests from the gateway; the rest wait here, so the
routing policy still picks among replicas when a slot frees up (late binding). Waiters are grouped by tenant:
a freed slot goes to the waiting tenant that has had the fewest slots from the queue for its weight (weighted
fair queuing; one tenant alone is first-in first-out), so a tenant that floods the queue delays its own
requests, not everyone's. A tenant that starts waiting begins level with the least served tenant waiting,
rather than with credit saved while it was idle. Beyond `max_queue` waiting requests the gateway sheds load
with 429 and a Retry-After estimated from how fast this queue has been draining; the request shed is the
newest of the tenant holding the most places for its weight, so a full queue refuses the flooding tenant
rather than a newcomer. A waiter whose client leaves is cancelled and drops out of the queue.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from switchyard.drain_rate import DrainRate, estimate_retry_after
from switchyard.fleet.errors import QueueFullError

DEFAULT_TENANT = "default"
"""The tenant of every request when the gateway runs without tenancy (the admission hooks see it too): the
queue is then first-in first-out."""


@dataclass
class _TenantLine:
    """One tenant's waiters, oldest first, and the slots it has had from the queue divided by its weight."""

    weight: float
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    served: float = 0.0


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
        self._lines: dict[str, _TenantLine] = {}
        """Tenants with requests waiting (a tenant's line goes when its last waiter leaves)."""
        self._depth = 0
        self._reserved = 0
        """Slots promised to woken waiters that have not yet resumed to take them."""

    @property
    def depth(self) -> int:
        """Requests waiting now."""
        return self._depth

    def waiting(self, tenant: str) -> int:
        """Requests `tenant` has waiting now."""
        line = self._lines.get(tenant)
        return len(line.waiters) if line is not None else 0

    async def enter(self, tenant: str = DEFAULT_TENANT, weight: float = 1.0) -> None:
        """Return when the caller may take a slot; it must then take one before its next await.

        QueueFullError when the queue is full and `tenant` holds its fair part of it; whatever `fail_waiters`
        raises when the pool loses its replicas.
        """
        if not self._depth and self._free_slots() - self._reserved > 0:
            return
        if self._depth >= self.max_queue and not self._push_out(tenant, weight):
            raise self._full()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self._line(tenant, weight)
        line.waiters.append(waiter)
        self._depth += 1
        try:
            await waiter
        except asyncio.CancelledError:
            if (
                not self._remove(tenant, waiter)
                and waiter.done()
                and not waiter.cancelled()
                and waiter.exception() is None
            ):
                self._reserved -= 1  # woken, then cancelled before it took the slot: pass the slot on
                self.wake()
            raise
        self._reserved -= 1

    def wake(self) -> None:
        """Let waiters in while slots are free (after a request finished or a replica became routable)."""
        while self._depth and self._free_slots() - self._reserved > 0:
            tenant, line = min(self._lines.items(), key=lambda item: item[1].served)
            waiter = line.waiters.popleft()
            self._depth -= 1
            if not line.waiters:
                del self._lines[tenant]
            if waiter.done():
                continue
            line.served += 1 / line.weight
            waiter.set_result(None)
            self._reserved += 1

    def record_finish(self) -> None:
        """A request left the pool (any outcome): the drain rate behind Retry-After."""
        self.drain_rate.record(self._clock())

    def fail_waiters(self, error: Callable[[], Exception]) -> None:
        """Answer every waiter with a fresh `error()` (the pool has no routable replica left to wait for)."""
        lines, self._lines, self._depth = self._lines, {}, 0
        for line in lines.values():
            for waiter in line.waiters:
                if not waiter.done():
                    waiter.set_exception(error())

    def _line(self, tenant: str, weight: float) -> _TenantLine:
        line = self._lines.get(tenant)
        if line is None:
            start = min((other.served for other in self._lines.values()), default=0.0)
            line = self._lines[tenant] = _TenantLine(weight=weight, served=start)
        return line

    def _push_out(self, tenant: str, weight: float) -> bool:
        """Make room for `tenant` by refusing the newest waiter of the tenant holding the most places for its
        weight, if that tenant holds more than `tenant` would with this request; False when none does."""
        if not self._lines:
            return False
        arriving = (self.waiting(tenant) + 1) / weight
        biggest, line = max(self._lines.items(), key=lambda item: len(item[1].waiters) / item[1].weight)
        if biggest == tenant or len(line.waiters) / line.weight <= arriving:
            return False
        waiter = line.waiters.pop()
        self._depth -= 1
        if not line.waiters:
            del self._lines[biggest]
        if not waiter.done():
            waiter.set_exception(self._full())
        return True

    def _remove(self, tenant: str, waiter: asyncio.Future[None]) -> bool:
        line = self._lines.get(tenant)
        if line is None or waiter not in line.waiters:
            return False
        line.waiters.remove(waiter)
        self._depth -= 1
        if not line.waiters:
            del self._lines[tenant]
        return True

    def _full(self) -> QueueFullError:
        return QueueFullError(
            self.pool, estimate_retry_after(self._depth, self.drain_rate.per_second(self._clock()))
        )
