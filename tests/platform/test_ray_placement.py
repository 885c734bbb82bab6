"""Gang placement on a real two-node Ray cluster with logical GPUs (head: 2, worker: 4): a gang lands whole on
one node as a STRICT_PACK placement group bound to the node the policy chose, with the policy's GPUs as its
CUDA_VISIBLE_DEVICES; a gang that fits no single node's free GPUs waits rather than being split; a node that
is killed loses no job."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import ray
import uvicorn
from ray.cluster_utils import Cluster
from ray_platform import (
    CHECKPOINTING_JOB,
    NODE_CPUS,
    checkpointing_spec,
    expected_total,
    reconcile_until,
    result,
    running_plane,
    runs,
    two_node_cluster,
)

from switchyard.fleet.replicas.ports import free_port
from switchyard.platform.cli import main as cluster_main
from switchyard.platform.cluster_server import ClusterService, ClusterSettings, build_cluster_app
from switchyard.platform.control_plane import ControlPlane
from switchyard.platform.health_monitor import HealthSettings
from switchyard.platform.jobs import JobState


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with two_node_cluster(second_node_gpus=4) as started:
        yield started


@pytest.fixture
def plane(cluster: Cluster, tmp_path: Path) -> Iterator[ControlPlane]:
    with running_plane(tmp_path) as started:
        yield started


def node_with_gpus(plane: ControlPlane, count: int) -> str:
    plane.reconcile()
    return next(node.id for node in plane.nodes() if node.alive and len(node.gpus) == count)


def test_a_gang_lands_whole_on_one_node_and_a_gang_that_fits_no_node_waits_unsplit(
    plane: ControlPlane, tmp_path: Path
) -> None:
    big_node = node_with_gpus(plane, 4)
    gang = plane.submit(checkpointing_spec(tmp_path / "gang", steps=400, gpus_per_worker=1, workers=3)).job.id
    reconcile_until(plane, lambda: len(runs(tmp_path / "gang")) == 3, "the gang's three workers run")

    placed = plane.job(gang).job
    assert placed.state is JobState.RUNNING and placed.placement is not None
    assert placed.placement.node_ids == {big_node}  # the only node with three free GPUs
    group = ray.util.placement_group_table()
    [table] = [entry for entry in group.values() if entry["name"] == f"switchyard-job-{gang}-1"]
    assert table["strategy"] == "STRICT_PACK"
    assert set(table["bundles_to_node_id"].values()) == {big_node}
    assert [bundle for bundle in table["bundles"].values()] == [{"GPU": 1.0, "CPU": 0.1}] * 3
    policy_gpus = sorted(str(slot.gpus[0]) for slot in placed.placement.workers)
    assert sorted(str(run["gpus"]) for run in runs(tmp_path / "gang")) == policy_gpus

    # Free now: 2 GPUs on the head, 1 on the big node. Three GPUs on one node exist nowhere: it waits whole.
    waiting = plane.submit(checkpointing_spec(tmp_path / "waiting", steps=5, workers=3)).job.id
    for _ in range(10):
        plane.reconcile()
    assert plane.job(waiting).job.state is JobState.QUEUED
    assert plane.job(waiting).job.placement is None
    assert runs(tmp_path / "waiting") == []
    assert not any(
        entry["name"].startswith(f"switchyard-job-{waiting}")
        for entry in ray.util.placement_group_table().values()
    )

    plane.cancel(gang)
    reconcile_until(  # the gang's checkpoint grace, then three fresh worker actors: slow on a busy machine
        plane,
        lambda: plane.job(waiting).job.state is JobState.SUCCEEDED,
        "the waiting gang runs",
        timeout=180.0,
    )
    assert plane.job(gang).job.state is JobState.CANCELLED
    assert plane.job(waiting).attempts == 1
    finished = plane.job(waiting)
    assert result(tmp_path / "waiting") == {"total": expected_total(5), "steps": 5}
    assert finished.job.placement is None and finished.finished_at is not None


def test_a_gang_that_may_spread_gets_one_bundle_per_worker_each_on_its_chosen_node(
    plane: ControlPlane, tmp_path: Path
) -> None:
    workdir = tmp_path / "spread"
    job_id = plane.submit(checkpointing_spec(workdir, steps=5, workers=3, same_node=False)).job.id
    reconcile_until(  # three fresh worker actors: slow on a busy machine (it took over 60 s once in CI)
        plane,
        lambda: plane.job(job_id).job.state is JobState.SUCCEEDED,
        "the spread gang runs",
        timeout=180.0,
    )
    [table] = [
        entry
        for entry in ray.util.placement_group_table().values()
        if entry["name"] == f"switchyard-job-{job_id}-1"
    ]
    assert table["strategy"] == "PACK"
    chosen = [run["gpus"] for run in runs(workdir)]
    assert len(chosen) == 3 and len(set(table["bundles_to_node_id"].values())) == 2  # best-fit: 2 + 1 GPUs
    assert result(workdir) == {"total": expected_total(5), "steps": 5}


@pytest.mark.slow  # another node joins and dies: about 20 s more on top of the module's cluster
def test_a_killed_node_loses_no_job(cluster: Cluster, plane: ControlPlane, tmp_path: Path) -> None:
    doomed = cluster.add_node(num_cpus=NODE_CPUS, num_gpus=2)
    cluster.wait_for_nodes()
    doomed_id = doomed.node_id
    reconcile_until(
        plane, lambda: any(node.id == doomed_id and node.alive for node in plane.nodes()), "it joins"
    )
    others = [node.id for node in plane.nodes() if node.id != doomed_id and node.alive]
    for node_id in others:
        plane.cordon(node_id)  # so the job lands on the node about to die
    workdir = tmp_path / "train"
    job_id = plane.submit(checkpointing_spec(workdir, steps=60, step_seconds=0.1, gpus_per_worker=2)).job.id
    reconcile_until(plane, lambda: len(runs(workdir)) == 1, "the job runs on the doomed node")
    assert plane.job(job_id).job.placement.node_ids == {doomed_id}  # type: ignore[union-attr]
    reconcile_until(plane, lambda: (workdir / "checkpoint.json").is_file(), "it checkpoints")
    job_pid = int(runs(workdir)[0]["pid"])  # type: ignore[call-overload]

    cluster.remove_node(doomed, allow_graceful=False)
    reconcile_until(plane, lambda: plane.job(job_id).job.state is JobState.QUEUED, "the job is requeued")
    assert "lost" in plane.job(job_id).message
    assert not psutil.pid_exists(job_pid) or psutil.Process(job_pid).status() == psutil.STATUS_ZOMBIE

    plane.uncordon(others[0])
    reconcile_until(
        plane, lambda: plane.job(job_id).job.state is JobState.SUCCEEDED, "it resumes and finishes", 120
    )
    second = runs(workdir)[-1]
    assert second["attempt"] == "2" and int(second["from_step"]) > 0  # type: ignore[call-overload]
    assert result(workdir) == {"total": expected_total(60), "steps": 60}


def test_cluster_start_runs_the_loop_behind_the_api_and_the_cli(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port("127.0.0.1")
    service = ClusterService(
        ClusterSettings(
            port=port,
            db_path=tmp_path / "jobs.db",
            reconcile_interval_s=0.2,
            cpus_per_worker=0.1,
            health=HealthSettings(heartbeat_interval_s=0.5, fault_file=tmp_path / "faults.json"),
        )
    )
    server = uvicorn.Server(
        uvicorn.Config(build_cluster_app(service), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        started_by = time.monotonic() + 30
        while not server.started and time.monotonic() < started_by:
            time.sleep(0.05)
        assert cluster_main(["--url", url, "quota", "set", "research", "--gpus", "2"]) == 0
        workdir = tmp_path / "job"
        workdir.mkdir()
        command = [sys.executable, str(CHECKPOINTING_JOB), str(workdir), "5", "0.01"]
        assert (
            cluster_main(
                ["--url", url, "submit", "--team", "research", "--gpus-per-worker", "2", "--", *command]
            )
            == 0
        )
        job_id = capsys.readouterr().out.splitlines()[-1].split()[2]
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/v1/cluster/jobs/{job_id}").json()["state"] != "succeeded":
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.2)
        assert result(workdir) == {"total": expected_total(5), "steps": 5}
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert not thread.is_alive() and ray.is_initialized()  # the service stopped; the caller's Ray stays
