"""Serving on the platform: fleet replicas as serving-class jobs, and an autoscaler that sizes each pool.

A pool's replicas are jobs of the SERVING class (not preemptible), each running `switchyard serve` on a port
its worker picks. Every `interval_s` the autoscaler reads each running replica's /metrics over HTTP (the
fleet's parser: waiting and running requests, KV cache usage) and adds a replica when the pool stayed busy
(waiting per replica or KV usage above the thresholds) for `up_after` samples in a row, or removes the newest
when it stayed idle (nothing running or waiting) for `down_after` samples: the gap between the two is the
hysteresis that keeps a bursty pool from flapping. A replica still queued or starting counts as capacity on
its way, so one burst adds one replica at a time. When the new replica needs GPUs that batch jobs hold, the
policy preempts them (serving outranks batch); they resume from their checkpoints once the pool shrinks.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import httpx

from switchyard.fleet.replica import ReplicaLoad
from switchyard.fleet.replica_load import parse_replica_load
from switchyard.platform.control_plane import ControlPlane
from switchyard.platform.errors import PlatformError
from switchyard.platform.gateway_registrar import GatewayRegistrar, worker_name
from switchyard.platform.job_store import JobRecord
from switchyard.platform.job_worker import HOST_PLACEHOLDER, PORT_PLACEHOLDER
from switchyard.platform.jobs import JobSpec, JobState, PriorityClass

logger = logging.getLogger(__name__)


def serve_command(model: str, served_name: str, serve_args: Sequence[str] = ()) -> tuple[str, ...]:
    """A fleet replica's command: `switchyard serve` listening on the port and address its worker picks."""
    return (
        *(sys.executable, "-m", "switchyard.cli", "serve", model),
        *("--host", HOST_PLACEHOLDER, "--port", PORT_PLACEHOLDER, "--served-model-name", served_name),
        *serve_args,
    )


@dataclass(frozen=True)
class ServingPoolSpec:
    name: str
    """Also the replicas' job name, so a pool's jobs are found by it."""
    team: str
    command: tuple[str, ...]
    """Each replica's command (see `serve_command`); it must listen on {port}."""
    gpus_per_replica: int = 1
    min_replicas: int = 1
    max_replicas: int = 4
    gateway_pool: str | None = None
    """The fleet gateway pool the replicas join once they answer (with the autoscaler's `gateway`)."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(
                f"pool {self.name!r}: need 0 <= min_replicas <= max_replicas and max_replicas >= 1"
            )
        if not any(PORT_PLACEHOLDER in part for part in self.command):
            raise ValueError(f"pool {self.name!r}: the command must listen on {PORT_PLACEHOLDER}")

    def replica_spec(self) -> JobSpec:
        return JobSpec(
            name=self.name,
            team=self.team,
            priority_class=PriorityClass.SERVING,
            gpus_per_worker=self.gpus_per_replica,
            preemptible=False,
            command=self.command,
        )


@dataclass(frozen=True)
class AutoscalerSettings:
    interval_s: float = 5.0
    busy_waiting_per_replica: float = 2.0
    """Mean waiting requests per replica above which a sample counts as busy."""
    busy_kv_usage: float = 0.85
    """Mean KV cache usage above which a sample counts as busy."""
    up_after: int = 3
    """Busy samples in a row before a replica is added."""
    down_after: int = 12
    """Idle samples in a row before a replica is removed (longer than up_after: the hysteresis)."""
    metrics_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        if self.up_after < 1 or self.down_after < 1:
            raise ValueError("up_after and down_after must be >= 1")


class ScaleAction(StrEnum):
    HOLD = "hold"
    UP = "up"
    DOWN = "down"


@dataclass
class PoolTrend:
    """Consecutive busy and idle samples of one pool: the autoscaler's only memory."""

    busy: int = 0
    idle: int = 0

    def observe(self, loads: Sequence[ReplicaLoad], settings: AutoscalerSettings) -> None:
        if not loads:
            self.busy = self.idle = 0
            return
        waiting = sum(load.num_waiting for load in loads) / len(loads)
        kv_usage = sum(load.kv_cache_usage for load in loads) / len(loads)
        if waiting > settings.busy_waiting_per_replica or kv_usage > settings.busy_kv_usage:
            self.busy, self.idle = self.busy + 1, 0
        elif all(load.num_waiting == 0 and load.num_running == 0 for load in loads):
            self.busy, self.idle = 0, self.idle + 1
        else:
            self.busy = self.idle = 0


def scale_action(
    pool: ServingPoolSpec, trend: PoolTrend, ready: int, on_the_way: int, settings: AutoscalerSettings
) -> ScaleAction:
    """What to do with the pool: `ready` replicas answer on /metrics, `on_the_way` are queued or starting."""
    total = ready + on_the_way
    if total < pool.min_replicas:
        return ScaleAction.UP
    if on_the_way:
        return ScaleAction.HOLD  # capacity is coming: judge again once it serves
    if trend.busy >= settings.up_after and total < pool.max_replicas:
        return ScaleAction.UP
    if trend.idle >= settings.down_after and total > pool.min_replicas:
        return ScaleAction.DOWN
    return ScaleAction.HOLD


def fetch_metrics(url: str, timeout_s: float) -> str | None:
    """A replica's /metrics page, or None when it does not answer (still loading, or gone)."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/metrics", timeout=timeout_s)
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


def _newest(replicas: Sequence[JobRecord]) -> JobRecord:
    """The replica a scale-down removes: the last submitted."""
    return max(replicas, key=lambda record: record.job.submitted_at)


@dataclass
class ServingAutoscaler:
    control_plane: ControlPlane
    pools: Sequence[ServingPoolSpec]
    settings: AutoscalerSettings = field(default_factory=AutoscalerSettings)
    scrape: Callable[[str, float], str | None] = fetch_metrics
    gateway: GatewayRegistrar | None = None
    """Registers answering replicas with a fleet gateway's pool (and removes leaving ones first)."""
    _trends: dict[str, PoolTrend] = field(default_factory=dict)

    def tick(self) -> dict[str, ScaleAction]:
        """One sample of every pool, and the action taken on each."""
        actions = {}
        for pool in self.pools:
            replicas = [
                record
                for record in self.control_plane.jobs()
                if record.job.spec.name == pool.name
                and record.job.state in (JobState.QUEUED, JobState.RUNNING, JobState.PREEMPTING)
            ]
            running = [record for record in replicas if record.job.state is JobState.RUNNING]
            per_replica = [self._loads(record) for record in running]
            loads = [load for replica_loads in per_replica for load in replica_loads]
            answering = [record for record, found in zip(running, per_replica, strict=True) if found]
            ready = len(answering)  # their /metrics answered
            trend = self._trends.setdefault(pool.name, PoolTrend())
            trend.observe(loads, self.settings)
            action = scale_action(pool, trend, ready, len(replicas) - ready, self.settings)
            leaving = _newest(replicas) if action is ScaleAction.DOWN else None
            if self.gateway is not None and pool.gateway_pool is not None:
                # before a scale-down is applied: the gateway stops routing to the leaving replica first
                endpoints = {
                    worker_name(pool.name, record.job.id, index): url
                    for record in answering
                    if record is not leaving
                    for index, url in enumerate(record.endpoints)
                }
                self.gateway.sync(pool.name, pool.gateway_pool, endpoints)
            self._apply(pool, action, replicas)
            if action is not ScaleAction.HOLD:
                self._trends[pool.name] = PoolTrend()
            actions[pool.name] = action
        return actions

    def run_forever(self, interval_s: float, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                logger.exception("an autoscaler pass failed; the next one retries")
            stop.wait(interval_s)

    def _loads(self, record: JobRecord) -> list[ReplicaLoad]:
        loads = []
        for endpoint in record.endpoints:
            text = self.scrape(endpoint, self.settings.metrics_timeout_s)
            load = None if text is None else parse_replica_load(text, time.monotonic())
            if load is not None:
                loads.append(load)
        return loads

    def _apply(self, pool: ServingPoolSpec, action: ScaleAction, replicas: list[JobRecord]) -> None:
        try:
            if action is ScaleAction.UP:
                record = self.control_plane.submit(pool.replica_spec())
                logger.info("pool %s: scaling up (replica job %s)", pool.name, record.job.id)
            elif action is ScaleAction.DOWN:
                newest = _newest(replicas)
                self.control_plane.cancel(newest.job.id)
                logger.info("pool %s: scaling down (replica job %s)", pool.name, newest.job.id)
        except PlatformError as error:
            logger.warning("pool %s: could not scale %s: %s", pool.name, action, error)
