"""`switchyard cluster start`: connects to Ray, opens the job store, and runs the reconcile loop beside the API.

The loop runs on its own thread (each pass is short: every Ray call in it returns at once); the API's handlers
run on uvicorn's worker threads and share the control plane's lock. Stopping the server stops the loop, tears
down the runs this driver owns (their jobs stay RUNNING in the store and are requeued by the next start), and
disconnects from Ray.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import ray
import uvicorn
from fastapi import FastAPI

from switchyard.home import switchyard_home
from switchyard.platform.api import build_app
from switchyard.platform.autoscaler import AutoscalerSettings, ServingAutoscaler, ServingPoolSpec
from switchyard.platform.control_plane import ControlPlane, PolicyFactory
from switchyard.platform.gateway_registrar import GatewayRegistrar, GatewayTarget
from switchyard.platform.health_monitor import HealthMonitor, HealthSettings
from switchyard.platform.job_store import JobStore
from switchyard.platform.policy import PreemptionBudget, Scheduler, TeamQuota
from switchyard.platform.policy.fair_share import FairSharePolicy
from switchyard.platform.ray_executor import RayExecutor
from switchyard.platform.ray_nodes import ray_nodes

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8790


def default_db_path() -> Path:
    return switchyard_home() / "cluster" / "jobs.db"


@dataclass(frozen=True)
class ClusterSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    db_path: Path = field(default_factory=default_db_path)
    ray_address: str | None = None
    """A running Ray cluster (`auto`, `HOST:PORT`); None starts a local instance with `local_gpus`."""
    local_gpus: int = 0
    """Logical GPUs of the local instance (a CPU machine can declare some to try the platform)."""
    reconcile_interval_s: float = 1.0
    cpus_per_worker: float = 1.0
    health: HealthSettings = field(default_factory=HealthSettings)
    budget: PreemptionBudget = field(default_factory=PreemptionBudget)
    serving_pools: tuple[ServingPoolSpec, ...] = ()
    autoscaler: AutoscalerSettings = field(default_factory=AutoscalerSettings)
    gateway: GatewayTarget | None = None
    """A fleet gateway whose pools the serving replicas join (`ServingPoolSpec.gateway_pool`)."""


def fair_share_factory(budget: PreemptionBudget) -> PolicyFactory:
    """The policy Switchyard runs, rebuilt for the current quotas on every pass that schedules."""

    def build(quotas: Mapping[str, TeamQuota]) -> Scheduler:
        return FairSharePolicy(quotas.values(), budget)

    return build


class ClusterService:
    """Everything `cluster start` runs, with a start and a stop the app's lifespan calls."""

    def __init__(self, settings: ClusterSettings) -> None:
        self.settings = settings
        self.store = JobStore(settings.db_path)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._opened_ray = False
        self.control_plane: ControlPlane | None = None
        self.autoscaler: ServingAutoscaler | None = None

    def start(self) -> ControlPlane:
        if not ray.is_initialized():
            if self.settings.ray_address is None:
                ray.init(
                    num_gpus=self.settings.local_gpus, include_dashboard=False, logging_level=logging.ERROR
                )
            else:
                ray.init(address=self.settings.ray_address, logging_level=logging.ERROR)
            self._opened_ray = True
        self.control_plane = ControlPlane(
            self.store,
            RayExecutor(cpus_per_worker=self.settings.cpus_per_worker),
            fair_share_factory(self.settings.budget),
            ray_nodes,
            health=HealthMonitor(self.settings.health),
        )
        # The first pass on this thread: Ray sets up its serialization on first use, which is not safe to race.
        self.control_plane.reconcile()
        self._spawn("reconcile", self.control_plane.run_forever, self.settings.reconcile_interval_s)
        if self.settings.serving_pools:
            self.autoscaler = ServingAutoscaler(
                self.control_plane,
                self.settings.serving_pools,
                self.settings.autoscaler,
                gateway=GatewayRegistrar(self.settings.gateway)
                if self.settings.gateway is not None
                else None,
            )
            self._spawn("autoscale", self.autoscaler.run_forever, self.settings.autoscaler.interval_s)
        return self.control_plane

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        if self.control_plane is not None:
            self.control_plane.shutdown()
        if self._opened_ray:
            ray.shutdown()
        self.store.close()

    def _spawn(self, name: str, target: object, interval_s: float) -> None:
        thread = threading.Thread(target=target, args=(interval_s, self._stop), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)


def build_cluster_app(service: ClusterService) -> FastAPI:
    """The API app, whose lifespan starts and stops the service."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        service.stop()

    return build_app(service.start(), service.settings.health.fault_file, lifespan)


def run_cluster(settings: ClusterSettings, log_level: str = "warning") -> None:
    service = ClusterService(settings)
    app = build_cluster_app(service)
    print(f"switchyard cluster: control plane on http://{settings.host}:{settings.port}", flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=log_level)
