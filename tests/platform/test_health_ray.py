"""Health and repair on a real two-node Ray cluster (2 logical GPUs each): a faulty GPU is cordoned and its
job moves off from its checkpoint, the GPU goes to repair, burns in once fixed and returns; a drained node's
jobs move away and the node takes work again once uncordoned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ray.cluster_utils import Cluster
from ray_platform import (
    checkpointing_spec,
    expected_total,
    reconcile_until,
    result,
    running_plane,
    runs,
    two_node_cluster,
)

from switchyard.platform.control_plane import ControlPlane
from switchyard.platform.gpu_probes import set_injected_fault
from switchyard.platform.inventory import GpuHealth
from switchyard.platform.jobs import JobState

pytestmark = (
    pytest.mark.slow
)  # a second multi-node cluster: ~35 s; the repair steps are unit-tested without Ray


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with two_node_cluster(second_node_gpus=2) as started:
        yield started


@pytest.fixture
def plane(cluster: Cluster, tmp_path: Path) -> Iterator[ControlPlane]:
    with running_plane(tmp_path) as started:
        yield started


def gpu_health(plane: ControlPlane, node_id: str, gpu: int) -> GpuHealth:
    node = next(node for node in plane.nodes() if node.id == node_id)
    return node.gpus[gpu].health


def test_a_faulty_gpu_is_cordoned_its_job_moves_and_it_returns_after_repair_and_burn_in(
    plane: ControlPlane, tmp_path: Path
) -> None:
    workdir = tmp_path / "train"
    job_id = plane.submit(checkpointing_spec(workdir, steps=80, step_seconds=0.1)).job.id
    reconcile_until(plane, lambda: (workdir / "checkpoint.json").is_file(), "the job runs and checkpoints")
    [slot] = plane.job(job_id).job.placement.workers  # type: ignore[union-attr]
    node_id, gpu = slot.node_id, slot.gpus[0]

    set_injected_fault(tmp_path / "faults.json", node_id, gpu, "uncorrected ECC error")
    reconcile_until(plane, lambda: len(runs(workdir)) == 2, "the job resumes on another GPU")
    moved = plane.job(job_id)
    assert moved.job.state is JobState.RUNNING and moved.attempts == 2
    new_slot = moved.job.placement.workers[0]  # type: ignore[union-attr]
    assert (new_slot.node_id, new_slot.gpus[0]) != (node_id, gpu)
    assert int(runs(workdir)[1]["from_step"]) > 0  # type: ignore[call-overload]  # from its checkpoint
    reconcile_until(
        plane, lambda: gpu_health(plane, node_id, gpu) is GpuHealth.REPAIR, "the GPU is in repair"
    )
    assert "ECC" in next(node for node in plane.nodes() if node.id == node_id).gpus[gpu].reason
    assert [(entry.node_id, entry.gpu, entry.health) for entry in plane.repairs()] == [
        (node_id, gpu, GpuHealth.REPAIR)
    ]

    set_injected_fault(tmp_path / "faults.json", node_id, gpu, None)  # the repair
    reconcile_until(
        plane, lambda: gpu_health(plane, node_id, gpu) is GpuHealth.HEALTHY, "it burns in and returns"
    )
    reconcile_until(plane, lambda: plane.job(job_id).job.state is JobState.SUCCEEDED, "the job finishes", 120)
    assert result(workdir) == {"total": expected_total(80), "steps": 80}


def test_a_drained_node_moves_its_jobs_and_takes_work_again_once_uncordoned(
    plane: ControlPlane, tmp_path: Path
) -> None:
    workdir = tmp_path / "train"
    job_id = plane.submit(checkpointing_spec(workdir, steps=200, step_seconds=0.05, gpus_per_worker=2)).job.id
    reconcile_until(plane, lambda: (workdir / "checkpoint.json").is_file(), "the job runs and checkpoints")
    first_node = next(iter(plane.job(job_id).job.placement.node_ids))  # type: ignore[union-attr]

    assert plane.drain(first_node) == [job_id]
    reconcile_until(plane, lambda: len(runs(workdir)) == 2, "the job resumes on the other node")
    assert plane.job(job_id).job.placement.node_ids != {first_node}  # type: ignore[union-attr]
    assert next(node for node in plane.nodes() if node.id == first_node).cordoned

    plane.uncordon(first_node)
    other = plane.submit(checkpointing_spec(tmp_path / "other", steps=5, gpus_per_worker=2)).job.id
    reconcile_until(
        plane, lambda: plane.job(other).job.state is JobState.SUCCEEDED, "the node takes work again"
    )
    plane.cancel(job_id)
    reconcile_until(plane, lambda: plane.job(job_id).job.placement is None, "the cancelled job stops")
