"""The fleet at run time: its pools, the launchers that started replicas, the health checker and the proxy,
started and stopped together by the gateway app.

Replicas given as worker URLs are added when the runtime is built; launched ones when their launcher starts
(local processes or Ray actors; see launchers.py). The launchers tell their pool when
they restart a replica; everything else about health goes through the pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx

from switchyard.fleet.config import FleetConfig
from switchyard.fleet.health import HealthChecker
from switchyard.fleet.launchers import LauncherFactory, Launchers
from switchyard.fleet.metrics import FleetMetrics
from switchyard.fleet.pool import Pool
from switchyard.fleet.proxy import Proxy
from switchyard.fleet.replica import Replica
from switchyard.fleet.replicas.base import ReplicaLauncher

logger = logging.getLogger(__name__)

_IDLE_POLL = 0.05
"""Seconds between looks at whether the last request finished, while draining."""


class FleetRuntime:
    def __init__(
        self,
        config: FleetConfig,
        launcher_factory: LauncherFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.created = int(time.time())
        self.pools = {
            pool.model: Pool(pool, config.breaker, config.health_interval, clock) for pool in config.pools
        }
        for pool_config in config.pools:
            for index, url in enumerate(pool_config.workers):
                self.pools[pool_config.model].add(
                    Replica(
                        name=f"{pool_config.model}-worker-{index}",
                        url=url.rstrip("/"),
                        model=pool_config.model,
                    )
                )
        self.launchers: dict[str, ReplicaLauncher] = {}
        self.metrics = FleetMetrics(list(self.pools.values()), self.restarts)
        self.draining = False
        """Set by SIGTERM: new requests get 503 and /health says so, so a load balancer in front drains us."""
        self._launcher_factory = launcher_factory or Launchers()
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._proxy: Proxy | None = None
        self._health: HealthChecker | None = None

    @property
    def proxy(self) -> Proxy:
        if self._proxy is None:
            raise RuntimeError("the fleet runtime has not started")
        return self._proxy

    async def start(self) -> None:
        """Open the connection pool, launch replicas, and begin health checks (replicas start STARTING)."""
        config = self.config
        worker_headers = (
            {} if config.worker_api_key is None else {"authorization": f"Bearer {config.worker_api_key}"}
        )
        self._client = httpx.AsyncClient(
            headers=worker_headers,
            timeout=httpx.Timeout(
                connect=config.connect_timeout, read=config.read_timeout, write=60.0, pool=None
            ),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=30.0),
            follow_redirects=False,
        )
        self._proxy = Proxy(
            self._client, self.metrics, config.max_attempts, config.health_timeout, self._clock
        )
        for pool_config in config.pools:
            if pool_config.launch is None:
                continue
            pool = self.pools[pool_config.model]
            launcher = self._launcher_factory.create(pool_config.launch, pool.replica_restarted)
            self.launchers[pool.name] = launcher
            for replica in await launcher.start():
                pool.add(replica)
        self._health = HealthChecker(
            list(self.pools.values()),
            self._client,
            config.health_interval,
            config.health_timeout,
            worker_headers,
            self._clock,
        )
        self._health.start()
        for pool in self.pools.values():  # a policy's own tasks (kv_aware's event subscriber)
            await pool.policy.start(pool.replicas_now, self._client)

    async def stop(self, grace: float) -> None:
        """Stop checking, stop the launched replicas (they drain within `grace`), close connections."""
        if self._health is not None:
            await self._health.stop()
        for pool in self.pools.values():
            await pool.policy.stop()
            pool.close()
        results = await asyncio.gather(
            *(launcher.stop(grace) for launcher in self.launchers.values()), return_exceptions=True
        )
        for name, result in zip(self.launchers, results, strict=True):
            if isinstance(result, BaseException):
                logger.error("stopping the replicas of pool %s failed: %s", name, result)
        self._launcher_factory.close()
        if self._client is not None:
            await self._client.aclose()

    @property
    def num_in_flight(self) -> int:
        """Requests admitted or waiting, in every pool."""
        return sum(
            pool.admission.depth + sum(replica.in_flight for replica in pool.replicas)
            for pool in self.pools.values()
        )

    async def wait_until_idle(self, timeout: float) -> bool:
        """True once nothing is in flight, False if something still is after `timeout` seconds."""
        deadline = self._clock() + timeout
        while self.num_in_flight:
            if self._clock() >= deadline:
                return False
            await asyncio.sleep(_IDLE_POLL)
        return True

    def restarts(self) -> dict[str, int]:
        return {name: launcher.num_restarts for name, launcher in self.launchers.items()}
