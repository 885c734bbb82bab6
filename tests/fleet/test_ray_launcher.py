"""The Ray launcher on real local Ray clusters: one node with two logical GPUs, and two nodes built with
`ray.cluster_utils.Cluster`; real `switchyard serve` servers answer the official client on loopback."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import ray
from ray.cluster_utils import Cluster
from replica_probes import complete, eventually, serve_processes, tiny_spec, wait_until_serving

from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.replicas.ray import RayLauncher, ReplicaPlacementError
from switchyard.fleet.replicas.ray_connection import RayConnection
from switchyard.fleet.replicas.supervision import RestartPolicy

QUICK_RESTARTS = RestartPolicy(initial_backoff=0.1)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_resources_are_checked_before_anything_starts(launcher_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="whole GPUs"):
        RayLauncher(tiny_spec(launcher_model_dir, 1), gpus_per_replica=1.5)
    with pytest.raises(ValueError, match="CPUs"):
        RayLauncher(tiny_spec(launcher_model_dir, 1), cpus_per_replica=0)
    tensor_parallel = RayLauncher(
        tiny_spec(launcher_model_dir, 1, threads=None), gpus_per_replica=2, cpus_per_replica=3
    )
    assert tensor_parallel.bundle == {"CPU": 3.0, "GPU": 2.0}  # one bundle: its GPUs share a node
    assert tensor_parallel.threads_per_replica == 3


def test_each_replica_gets_its_own_gpu_and_comes_back_when_its_server_dies(launcher_model_dir: Path) -> None:
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level=logging.ERROR)
    try:
        restarted: list[Replica] = []
        launcher = RayLauncher(
            tiny_spec(launcher_model_dir, count=2, threads=None),
            gpus_per_replica=1,
            on_restart=restarted.append,
            restart_policy=QUICK_RESTARTS,
        )

        async def scenario() -> list[object]:
            replicas = await launcher.start()
            try:
                placements = [launcher.placement(replica) for replica in replicas]
                assert sorted(placement.gpu_ids for placement in placements) == [("0",), ("1",)]
                for placement in placements:
                    assert placement.url.startswith("http://127.0.0.1:")  # the gateway's node: loopback
                    environment = psutil.Process(placement.server_pid).environ()
                    assert environment["CUDA_VISIBLE_DEVICES"] == placement.gpu_ids[0]
                    assert environment["OMP_NUM_THREADS"] == "1"  # cpus_per_replica
                await asyncio.gather(*(wait_until_serving(replica) for replica in replicas))
                assert await asyncio.gather(*(complete(replica) for replica in replicas)) == ["tiny", "tiny"]

                victim = replicas[0]
                os.kill(placements[0].server_pid, signal.SIGKILL)
                await eventually(lambda: restarted == [victim], timeout=60, what="the replica restarts")
                assert launcher.num_restarts == 1
                assert launcher.placement(victim).server_pid != placements[0].server_pid
                assert launcher.placement(victim).gpu_ids == placements[0].gpu_ids  # the same reservation
                await wait_until_serving(victim)
                assert await complete(victim) == "tiny"
                groups = [launcher.placement_group(replica) for replica in replicas]
            finally:
                await launcher.stop(grace=10)
            assert all(replica.health is ReplicaHealth.DEAD for replica in replicas)
            return groups

        groups = asyncio.run(scenario())
        assert ray.is_initialized()  # the caller's Ray: the launcher leaves it up
        assert [ray.util.placement_group_table(group)["state"] for group in groups] == ["REMOVED"] * 2
        assert serve_processes(launcher_model_dir) == []
    finally:
        ray.shutdown()


def test_a_pool_no_node_can_hold_is_a_clear_error_and_a_shared_connection_stays_open(
    launcher_model_dir: Path,
) -> None:
    already_running = {process.pid for process in psutil.Process().children(recursive=True)}
    connection = RayConnection()  # a local Ray instance, as `--ray` without an address starts
    launcher = RayLauncher(
        tiny_spec(launcher_model_dir, count=1),
        gpus_per_replica=64,  # more GPUs than any one node has
        startup_timeout=3,
        connection=connection,
    )
    try:
        with pytest.raises(ReplicaPlacementError, match="no room"):
            asyncio.run(launcher.start())
        assert ray.is_initialized()  # other pools may be using it
        assert ray.util.placement_group_table() and all(
            group["state"] == "REMOVED" for group in ray.util.placement_group_table().values()
        )
    finally:
        connection.close()
    assert not ray.is_initialized()
    started = {process.pid for process in psutil.Process().children(recursive=True)} - already_running
    assert not [pid for pid in started if running(pid)]


@pytest.fixture(scope="module")
def two_node_cluster() -> Iterator[Cluster]:
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1, num_gpus=1)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def test_replicas_land_on_different_nodes_and_a_killed_actor_is_replaced(
    launcher_model_dir: Path, two_node_cluster: Cluster
) -> None:
    restarted: list[Replica] = []
    launcher = RayLauncher(
        tiny_spec(launcher_model_dir, count=2, threads=None),
        address=two_node_cluster.address,
        gpus_per_replica=1,
        on_restart=restarted.append,
        restart_policy=QUICK_RESTARTS,
    )

    async def scenario() -> None:
        replicas = await launcher.start()
        try:
            placements = [launcher.placement(replica) for replica in replicas]
            assert len({placement.node_id for placement in placements}) == 2
            for replica, placement in zip(replicas, placements, strict=True):
                table = ray.util.placement_group_table(launcher.placement_group(replica))
                assert table["strategy"] == "STRICT_PACK"
                assert table["bundles_to_node_id"] == {0: placement.node_id}
            await asyncio.gather(*(wait_until_serving(replica) for replica in replicas))
            assert await asyncio.gather(*(complete(replica) for replica in replicas)) == ["tiny", "tiny"]

            victim = replicas[1]
            os.kill(placements[1].actor_pid, signal.SIGKILL)  # the actor's worker: its server goes with it
            await eventually(lambda: restarted == [victim], timeout=60, what="the replica restarts")
            replaced = launcher.placement(victim)
            assert replaced.actor_pid != placements[1].actor_pid
            assert replaced.node_id == placements[1].node_id  # the same placement group, so the same node
            await wait_until_serving(victim)
            assert await complete(victim) == "tiny"
            await eventually(
                lambda: not running(placements[1].server_pid), timeout=30, what="the orphaned server ends"
            )
        finally:
            await launcher.stop(grace=10)

    asyncio.run(scenario())
    assert not ray.is_initialized()  # it closed the connection it opened; the cluster is still up
    assert two_node_cluster.head_node.remaining_processes_alive()
    assert serve_processes(launcher_model_dir) == []
