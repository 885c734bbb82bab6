"""Serving on the platform, end to end on a real one-node Ray cluster with two logical GPUs: a pool of replicas
runs as serving-class jobs beside a batch training job; when the pool stays busy the autoscaler adds a replica,
the policy preempts the batch job for its GPU (checkpoint signal, grace period), and once the pool is idle
again the replica goes and the batch job resumes from its checkpoint and finishes with the result an
uninterrupted run gives.

The replicas are a small HTTP server that serves /metrics in Switchyard's names with a load the test sets
(a CPU machine cannot run enough real `switchyard serve` replicas to queue requests); the autoscaler reads it
over HTTP as it reads a real replica's."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import ray
from ray_platform import (
    FAKE_REPLICA,
    NODE_CPUS,
    checkpointing_spec,
    control_plane,
    expected_total,
    reconcile_until,
    result,
    runs,
)

from switchyard.platform.autoscaler import AutoscalerSettings, ServingAutoscaler, ServingPoolSpec
from switchyard.platform.control_plane import ControlPlane
from switchyard.platform.jobs import JobState


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=NODE_CPUS, num_gpus=2, include_dashboard=False, logging_level=logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def plane(local_ray: None, tmp_path: Path) -> Iterator[ControlPlane]:
    plane = control_plane(tmp_path)
    try:
        yield plane
    finally:
        plane.shutdown()


def replicas(plane: ControlPlane, state: JobState) -> list[str]:
    return [
        record.job.id
        for record in plane.jobs()
        if record.job.spec.name == "chat" and record.job.state is state
    ]


def serving(plane: ControlPlane) -> bool:
    """A replica answers on its endpoint."""
    for record in plane.jobs():
        for endpoint in record.endpoints if record.job.spec.name == "chat" else ():
            try:
                return httpx.get(f"{endpoint}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
    return False


def test_a_busy_pool_preempts_a_batch_job_that_later_resumes_to_the_same_result(
    plane: ControlPlane, tmp_path: Path
) -> None:
    load = tmp_path / "load"
    load.write_text("0")
    pool = ServingPoolSpec(
        "chat",
        "serving",
        (sys.executable, str(FAKE_REPLICA), "{host}", "{port}", str(load)),
        min_replicas=1,
        max_replicas=2,
    )
    autoscaler = ServingAutoscaler(
        plane, [pool], AutoscalerSettings(up_after=2, down_after=2, busy_waiting_per_replica=2)
    )

    def step() -> None:
        autoscaler.tick()
        plane.reconcile()

    workdir = tmp_path / "train"
    batch = plane.submit(checkpointing_spec(workdir, steps=150, step_seconds=0.1)).job.id
    reconcile_until(
        plane, lambda: (workdir / "checkpoint.json").is_file(), "the batch job runs and checkpoints"
    )
    autoscaler.tick()  # the pool's minimum: one replica, on the other GPU
    reconcile_until(plane, lambda: serving(plane), "a replica serves")
    assert plane.job(batch).job.state is JobState.RUNNING

    reconcile_until(
        plane, lambda: plane.job(batch).job.last_checkpoint_at is not None, "it reports a checkpoint"
    )
    load.write_text("10")  # requests pile up in the pool
    reconcile_until(
        plane, lambda: (step(), len(replicas(plane, JobState.RUNNING)) == 2)[1], "the pool scales up"
    )
    preempted = plane.job(batch)
    assert preempted.job.state is JobState.QUEUED and len(preempted.job.preempted_at) == 1
    assert "preempted" in preempted.message
    assert int(runs(workdir)[0]["from_step"]) == 0 and result(workdir) is None  # type: ignore[call-overload]

    load.write_text("0")  # the burst is over
    reconcile_until(
        plane, lambda: (step(), plane.job(batch).job.state is JobState.RUNNING)[1], "the batch job resumes"
    )
    assert len(replicas(plane, JobState.RUNNING)) == 1 and len(replicas(plane, JobState.CANCELLED)) == 1
    reconcile_until(plane, lambda: plane.job(batch).job.state is JobState.SUCCEEDED, "it finishes", 120)
    second = runs(workdir)[1]
    assert second["attempt"] == "2" and int(second["from_step"]) > 0  # type: ignore[call-overload]
    assert result(workdir) == {"total": expected_total(150), "steps": 150}
