"""The fleet at run time: its pools, the launchers that started replicas, the health checker and the proxy,
started and stopped together by the gateway app.

Replicas given as worker URLs are added when the runtime is built; launched ones when their launcher starts
(local processes or Ray actors; see launchers.py). The launchers tell their pool when
they restart a replica; everything else about health goes through the pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx

from switchyard.fleet.admission_hooks import AdmissionHooks
from switchyard.fleet.cascade.config import CascadeConfig
from switchyard.fleet.cascade.runner import CascadeRunner
from switchyard.fleet.config import FleetConfig, LaunchConfig
from switchyard.fleet.gatekeeper import Gatekeeper
from switchyard.fleet.health import HealthChecker
from switchyard.fleet.launchers import LauncherFactory, Launchers
from switchyard.fleet.ledger.gate import CreditGate
from switchyard.fleet.ledger.hooks import CreditHooks
from switchyard.fleet.ledger.ledger import Ledger
from switchyard.fleet.metrics import FleetMetrics
from switchyard.fleet.online_eval.metrics import OnlineEvalMetrics
from switchyard.fleet.online_eval.recorder import OnlineEvalRecorder
from switchyard.fleet.pool import Pool
from switchyard.fleet.proxy import Proxy
from switchyard.fleet.replica import Replica
from switchyard.fleet.replicas.base import ReplicaLauncher
from switchyard.fleet.response_cache import ResponseCache
from switchyard.fleet.semantic_cache import EmbeddingsClient, SemanticCache
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.service import Tenancy
from switchyard.fleet.tenancy.weights_file import weights_toml, with_weights_file

logger = logging.getLogger(__name__)

_REPLICA_KEEPALIVE = 4.0
"""Seconds an idle connection to a replica is kept for the next request."""
_IDLE_POLL = 0.05
"""Seconds between looks at whether the last request finished, while draining."""


class FleetRuntime:
    def __init__(
        self,
        config: FleetConfig,
        launcher_factory: LauncherFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        hooks: AdmissionHooks | None = None,
        limits_clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """`hooks`: called around every admitted request (see admission_hooks.py); `limits_clock` times the
        keys' buckets and the response cache's expiry (default `clock`); `wall_clock` dates usage."""
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
        self.cascades: dict[str, CascadeConfig] = {cascade.name: cascade for cascade in config.cascades}
        """Model names served by trying pools in turn (cascade/), beside the pools' own names."""
        self.launchers: dict[str, ReplicaLauncher] = {}
        self.metrics = FleetMetrics(list(self.pools.values()), self.restarts, config.prices)
        limits_clock = limits_clock or clock
        self.tenancy = (
            Tenancy(open_database(config.tenants_db), limits_clock, wall_clock)
            if config.tenants_db is not None
            else None
        )
        """Tenants, keys, limits and usage; None when the gateway serves without tenancy."""
        self.cache = (
            ResponseCache(config.response_cache, limits_clock) if config.response_cache is not None else None
        )
        self._embeddings = (
            EmbeddingsClient(config.semantic_cache) if config.semantic_cache is not None else None
        )
        self.semantic_cache = (
            SemanticCache(config.semantic_cache, self._embeddings, config.response_cache.max_entries)
            if config.semantic_cache is not None and self._embeddings is not None and config.response_cache
            else None
        )
        self.online_eval = (
            OnlineEvalRecorder(config.online_eval, config.prices, wall_clock=wall_clock)
            if config.online_eval is not None
            else None
        )
        """The online-eval log's recorder; None when no request is sampled."""
        if self.online_eval is not None:
            self.online_eval.metrics = OnlineEvalMetrics(self.metrics.registry, self.online_eval.log)
        self._credits: CreditHooks | None = None
        if hooks is None and config.credits_db is not None:
            gate = CreditGate(Ledger.open(Path(config.credits_db)), config.prices)
            self._credits = hooks = CreditHooks(gate)
        self._hooks = hooks
        self._weights_dir: Path | None = None
        self.draining = False
        """Set by SIGTERM: new requests get 503 and /health says so, so a load balancer in front drains us."""
        self._launcher_factory = launcher_factory or Launchers()
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._proxy: Proxy | None = None
        self._gatekeeper: Gatekeeper | None = None
        self._cascade_runner: CascadeRunner | None = None
        self._health: HealthChecker | None = None

    @property
    def proxy(self) -> Proxy:
        if self._proxy is None:
            raise RuntimeError("the fleet runtime has not started")
        return self._proxy

    @property
    def gatekeeper(self) -> Gatekeeper:
        """The way every proxied request goes: limits, cache, hooks, usage, then the proxy."""
        if self._gatekeeper is None:
            raise RuntimeError("the fleet runtime has not started")
        return self._gatekeeper

    @property
    def cascade_runner(self) -> CascadeRunner:
        """The way a request to a cascade goes: each tier in turn through the gatekeeper."""
        if self._cascade_runner is None:
            raise RuntimeError("the fleet runtime has not started")
        return self._cascade_runner

    async def start(self) -> None:
        """Open the connection pools, launch replicas, and begin health checks (replicas start STARTING)."""
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
        self._session = aiohttp.ClientSession(
            # idle connections are dropped before uvicorn's own 5 s keep-alive (a Switchyard replica's) drops
            # them, so a request never goes out on a connection the replica is closing
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=_REPLICA_KEEPALIVE),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=config.connect_timeout, sock_read=config.read_timeout
            ),
            auto_decompress=False,  # bodies pass through as the replica wrote them
            skip_auto_headers=("Content-Type",),  # only the client's own, as it sent it
        )
        self._proxy = Proxy(
            self._session, self._client, self.metrics, config.max_attempts, config.health_timeout, self._clock
        )
        self._gatekeeper = Gatekeeper(
            self._proxy,
            self.metrics,
            config.prices,
            self.tenancy,
            self.cache,
            self._hooks,
            self.online_eval,
            self._clock,
            {
                pool.model: (self.pools[pool.shadow.pool], pool.shadow.share)
                for pool in config.pools
                if pool.shadow is not None
            },
            self.semantic_cache,
        )
        self._cascade_runner = CascadeRunner(self._gatekeeper, self.pools, self.metrics)
        if self.online_eval is not None:
            self.online_eval.writer.start()
        for pool_config in config.pools:
            if pool_config.launch is None:
                continue
            pool = self.pools[pool_config.model]
            launch = await self._with_tenant_weights(pool_config.launch)
            launcher = self._launcher_factory.create(launch, pool.replica_restarted)
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

    def credit_balances(self) -> dict[str, int] | None:
        """Every tenant's credit balance now, in micro-credits; None without a credits ledger. Reads the
        ledger's file: call it off the event loop."""
        if self._credits is None:
            return None
        gate = self._credits.gate
        return {tenant: gate.balance(tenant) for tenant in gate.ledger.tenants()}

    async def stop(self, grace: float) -> None:
        """Stop checking, stop the launched replicas (they drain within `grace`), close connections."""
        if self._health is not None:
            await self._health.stop()
        for pool in self.pools.values():
            await pool.policy.stop()
            pool.close()
        if self._credits is not None:
            self._credits.close()
        if self._gatekeeper is not None:
            await self._gatekeeper.shadow.close()
        if self.online_eval is not None:
            await self.online_eval.writer.stop()
        results = await asyncio.gather(
            *(launcher.stop(grace) for launcher in self.launchers.values()), return_exceptions=True
        )
        for name, result in zip(self.launchers, results, strict=True):
            if isinstance(result, BaseException):
                logger.error("stopping the replicas of pool %s failed: %s", name, result)
        self._launcher_factory.close()
        if self._client is not None:
            await self._client.aclose()
        if self._embeddings is not None:
            await self._embeddings.aclose()
        if self._session is not None:
            await self._session.close()
        if self.tenancy is not None:
            self.tenancy.close()
        if self._weights_dir is not None:
            shutil.rmtree(self._weights_dir, ignore_errors=True)

    async def _with_tenant_weights(self, launch: LaunchConfig) -> LaunchConfig:
        """With tenancy, launched replicas read the tenants' weights (tenancy/weights_file.py)."""
        if self.tenancy is None:
            return launch
        listings = await self.tenancy.listings()
        if not listings:
            return launch
        if self._weights_dir is None:
            self._weights_dir = Path(tempfile.mkdtemp(prefix="switchyard-fleet-"))
        path = self._weights_dir / "tenant-weights.toml"
        path.write_text(weights_toml(listing.tenant for listing in listings))
        spec = dataclasses.replace(launch.spec, serve_args=with_weights_file(launch.spec.serve_args, path))
        return dataclasses.replace(launch, spec=spec)

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
