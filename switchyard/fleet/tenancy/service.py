"""The gateway's tenancy: the tenants database used from the event loop, and the keys' limits.

Every database call runs on one worker thread, in order, so the event loop never waits on disk or network,
and a usage query sees every usage row recorded before it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from switchyard.fleet.tenancy.database import Database
from switchyard.fleet.tenancy.key_limiter import KeyLimiter
from switchyard.fleet.tenancy.records import Caller
from switchyard.fleet.tenancy.store import TenantListing, TenantStore
from switchyard.fleet.tenancy.usage_log import UsageLog, UsageTotals
from switchyard.fleet.usage import TokenUsage

_T = TypeVar("_T")


class Tenancy:
    def __init__(
        self,
        database: Database,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock` times the limits' buckets; `wall_clock` dates usage."""
        self.database = database
        self.store = TenantStore(database, wall_clock)
        self.usage = UsageLog(database)
        self.limiter = KeyLimiter(clock)
        self._wall_clock = wall_clock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tenants-db")

    async def resolve(self, key: str) -> Caller | None:
        """The caller a key belongs to, None for an unknown or rotated-away key."""
        return await self._run(partial(self.store.resolve, key))

    async def record(self, tenant: str, model: str, usage: TokenUsage, cost: float, cache_hit: bool) -> None:
        now = self._wall_clock()
        await self._run(partial(self.usage.record, tenant, model, now, usage, cost, cache_hit))

    async def totals(self, tenant: str | None, start: float | None, end: float | None) -> list[UsageTotals]:
        return await self._run(partial(self.usage.totals, tenant, start, end))

    async def listings(self) -> list[TenantListing]:
        return await self._run(self.store.list)

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.database.close()

    async def _run(self, call: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)
