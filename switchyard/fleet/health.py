"""Active health checks: every `interval`, GET /health of each replica, and /metrics of the healthy ones.

A starting or ejected replica (the latter once its breaker's backoff has passed) becomes routable when /health
answers 200. A routable one that answers anything else, or refuses the connection, is ejected at once: unlike
a failed request, which may be the request's fault, that is the replica saying it cannot serve. A check that
times out counts as one failure towards the breaker instead, as a timed-out request does: a replica busy enough
to answer slowly should not be taken out, and its load moved onto the others, on one slow answer.
Replicas a launcher marked dead are left to the launcher. Each replica is checked by its own task, so one that
hangs until the timeout delays no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable, Sequence

import httpx

from switchyard.fleet.pool import Pool
from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.replica_load import parse_replica_load

logger = logging.getLogger(__name__)


class _Probe(enum.Enum):
    OK = "ok"
    REFUSED = "refused"
    """An answer other than 200: the replica is there and says it cannot serve (starting, draining)."""
    UNREACHABLE = "unreachable"
    """The connection was refused or reset."""
    TIMED_OUT = "timed_out"


class HealthChecker:
    def __init__(
        self,
        pools: Sequence[Pool],
        client: httpx.AsyncClient,
        interval: float,
        timeout: float,
        headers: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pools = pools
        self._client = client
        self._interval = interval
        self._timeout = timeout
        self._headers = headers or {}
        self._clock = clock
        self._loop_task: asyncio.Task[None] | None = None
        self._checks: dict[Replica, asyncio.Task[None]] = {}

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run(), name="fleet-health")

    async def stop(self) -> None:
        tasks = [task for task in (self._loop_task, *self._checks.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self.check_all()
            await asyncio.sleep(self._interval)

    def check_all(self) -> None:
        """Start a check of every replica whose previous check has finished."""
        for pool in self._pools:
            for replica in list(pool.replicas):
                running = self._checks.get(replica)
                if running is None or running.done():
                    self._checks[replica] = asyncio.create_task(self.check(pool, replica))

    async def check(self, pool: Pool, replica: Replica) -> None:
        health = replica.health
        if health is ReplicaHealth.DEAD:
            pool.mark_lost(replica)
            return
        if health is ReplicaHealth.DRAINING:
            return
        breaker = pool.breaker(replica)
        # An ejected replica waits for its probe; but a request in flight when it was ejected may since have
        # succeeded and closed its breaker, which then has no probe due: it is probed now, or it stays out.
        if health is ReplicaHealth.EJECTED and breaker.is_open and not breaker.probe_due(self._clock()):
            return
        result = await self._probe(replica)
        if replica.health is not health:  # a launcher or the proxy changed it meanwhile; theirs is newer
            return
        if result is _Probe.OK:
            if health is not ReplicaHealth.HEALTHY:
                logger.info("replica %s (%s) is healthy", replica.name, replica.url)
                pool.restore(replica)
            await self._scrape(replica)
            return
        if health is ReplicaHealth.STARTING:
            return
        if health is ReplicaHealth.HEALTHY and result is _Probe.TIMED_OUT:
            pool.record_failure(replica)
        elif health is ReplicaHealth.HEALTHY:
            logger.warning("replica %s (%s) failed its health check; ejected", replica.name, replica.url)
            pool.fail_check(replica)
        else:
            pool.fail_check(replica)  # still down: the next probe waits longer
        if result is not _Probe.REFUSED and replica.health is ReplicaHealth.EJECTED:
            # Out, and not saying so itself (no answer at all): its open streams would hang until the read
            # timeout. A replica that answers 503 (draining) is left to finish what it streams.
            pool.mark_lost(replica)

    async def _probe(self, replica: Replica) -> _Probe:
        try:
            response = await self._client.get(
                f"{replica.url}/health", headers=self._headers, timeout=self._timeout
            )
        except httpx.TimeoutException:
            return _Probe.TIMED_OUT
        except httpx.HTTPError:
            return _Probe.UNREACHABLE
        return _Probe.OK if response.status_code == 200 else _Probe.REFUSED

    async def _scrape(self, replica: Replica) -> None:
        """Read the replica's load; a server without /metrics simply keeps the load it had."""
        with contextlib.suppress(httpx.HTTPError):
            response = await self._client.get(
                f"{replica.url}/metrics", headers=self._headers, timeout=self._timeout
            )
            if response.status_code == 200:
                load = parse_replica_load(response.text, self._clock())
                if load is not None:
                    replica.load = load
