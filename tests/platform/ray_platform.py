"""Helpers for the control plane's tests on real local Ray clusters with logical GPUs."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from switchyard.platform.cluster_server import fair_share_factory
from switchyard.platform.control_plane import ControlPlane
from switchyard.platform.health_monitor import HealthMonitor, HealthSettings
from switchyard.platform.job_store import JobStore
from switchyard.platform.jobs import CheckpointPolicy, JobSpec, PriorityClass
from switchyard.platform.policy import PreemptionBudget, TeamQuota
from switchyard.platform.ray_executor import RayExecutor
from switchyard.platform.ray_nodes import ray_nodes

JOBS = Path(__file__).parent / "jobs"
CHECKPOINTING_JOB = JOBS / "checkpointing_job.py"
FAKE_REPLICA = JOBS / "fake_replica.py"
NODE_CPUS = 4
"""Logical CPUs per test node: workers take 0.1 each, agents none."""


@contextmanager
def two_node_cluster(second_node_gpus: int) -> Iterator[Cluster]:
    """A local Ray cluster of a head with 2 logical GPUs and one more node, Ray connected to it throughout."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": NODE_CPUS, "num_gpus": 2, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=NODE_CPUS, num_gpus=second_node_gpus)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level=logging.ERROR)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@contextmanager
def running_plane(tmp_path: Path) -> Iterator[ControlPlane]:
    plane = control_plane(tmp_path)
    try:
        yield plane
    finally:
        plane.shutdown()


def control_plane(tmp_path: Path, teams: tuple[str, ...] = ("research", "serving")) -> ControlPlane:
    """A control plane on the connected Ray cluster, with the fair-share policy and quick heartbeats."""
    store = JobStore(tmp_path / "jobs.db")
    for team in teams:
        store.set_quota(TeamQuota(team, guaranteed_gpus=0))
    health = HealthMonitor(
        HealthSettings(
            heartbeat_interval_s=0.5,
            heartbeat_timeout_s=20.0,  # generous: a loaded test machine delays heartbeats
            startup_grace_s=60.0,
            fault_file=tmp_path / "faults.json",
        )
    )
    return ControlPlane(
        store,
        RayExecutor(cpus_per_worker=0.1, placement_timeout_s=60.0, checkpoint_poll_s=0.5),
        fair_share_factory(PreemptionBudget(min_interval_per_job_s=0.0)),
        ray_nodes,
        health=health,
    )


def reconcile_until(
    plane: ControlPlane, condition: Callable[[], bool], what: str, timeout: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        plane.reconcile()
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}")


def checkpointing_spec(
    workdir: Path,
    *,
    name: str = "train",
    team: str = "research",
    steps: int = 40,
    step_seconds: float = 0.05,
    gpus_per_worker: int = 1,
    workers: int = 1,
    same_node: bool = True,
) -> JobSpec:
    workdir.mkdir(parents=True, exist_ok=True)
    return JobSpec(
        name=name,
        team=team,
        priority_class=PriorityClass.BATCH,
        gpus_per_worker=gpus_per_worker,
        workers=workers,
        same_node=same_node,
        checkpoint=CheckpointPolicy(signal="SIGUSR1", grace_period_s=20.0),
        command=(sys.executable, str(CHECKPOINTING_JOB), str(workdir), str(steps), str(step_seconds)),
    )


def expected_total(steps: int) -> int:
    """What the checkpointing job computes when nothing interrupts it."""
    total = 0
    for step in range(steps):
        total = (total * 31 + step * step + 7) % 1_000_003
    return total


def runs(workdir: Path) -> list[dict[str, object]]:
    path = workdir / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def result(workdir: Path) -> dict[str, int] | None:
    path = workdir / "result.json"
    return json.loads(path.read_text()) if path.is_file() else None
