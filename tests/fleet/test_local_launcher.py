"""The local launcher: real `switchyard serve` processes on loopback, a real SIGKILL, the official client."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from replica_probes import (
    TINY_SERVE_ARGS,
    complete,
    eventually,
    serve_processes,
    tiny_spec,
    wait_until_serving,
)

from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.replicas.base import ReplicaSpec
from switchyard.fleet.replicas.local import LocalLauncher
from switchyard.fleet.replicas.ports import free_port, http_url, port_is_free
from switchyard.fleet.replicas.serve_command import available_cores, serve_command, server_environment
from switchyard.fleet.replicas.supervision import RestartBackoff, RestartPolicy, RunOutcome


def test_backoff_doubles_up_to_its_cap_and_resets_after_a_stable_run() -> None:
    backoff = RestartBackoff(RestartPolicy(initial_backoff=1, max_backoff=5, stable_after=60))
    crash = RunOutcome("exited with code 1", uptime=10, became_healthy=True)
    assert [backoff.delay_after(crash) for _ in range(5)] == [1, 2, 4, 5, 5]
    assert backoff.delay_after(RunOutcome("was killed by SIGKILL", uptime=61, became_healthy=True)) == 1
    assert backoff.delay_after(crash) == 2


def test_backoff_gives_up_after_failed_starts_in_a_row_only() -> None:
    backoff = RestartBackoff(RestartPolicy(max_failed_starts=3))
    never_up = RunOutcome("exited with code 2", uptime=1, became_healthy=False)
    came_up = RunOutcome("exited with code 1", uptime=5, became_healthy=True)
    assert backoff.delay_after(never_up) is not None
    assert backoff.delay_after(never_up) is not None
    assert backoff.delay_after(came_up) is not None  # a run that came up breaks the streak
    assert backoff.delay_after(never_up) is not None
    assert backoff.delay_after(never_up) is not None
    assert backoff.delay_after(never_up) is None


def test_the_launcher_owns_each_replica_s_address_and_name(tmp_path: Path) -> None:
    for flag in ("--port", "--host=0.0.0.0", "--served-model-name"):
        with pytest.raises(ValueError, match=flag.partition("=")[0]):
            LocalLauncher(ReplicaSpec("m", "pool", 1, serve_args=(flag, "1")))
    with pytest.raises(ValueError, match="at least one replica"):
        LocalLauncher(ReplicaSpec("m", "pool", 0))
    command = serve_command(ReplicaSpec("m", "pool", 1, serve_args=("--dtype", "float32")), "127.0.0.1", 9)
    assert command[-8:] == [
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--served-model-name",
        "pool",
        "--dtype",
        "float32",
    ]


def test_cores_are_split_between_replicas_unless_the_spec_says() -> None:
    assert LocalLauncher(ReplicaSpec("m", "pool", 2)).threads_per_replica == max(1, available_cores() // 2)
    assert LocalLauncher(ReplicaSpec("m", "pool", 64 * available_cores())).threads_per_replica == 1
    assert LocalLauncher(ReplicaSpec("m", "pool", 2, threads=3)).threads_per_replica == 3
    environment = server_environment(3, gpu_ids=["1", "3"])
    assert environment["OMP_NUM_THREADS"] == environment["MKL_NUM_THREADS"] == "3"
    assert environment["CUDA_VISIBLE_DEVICES"] == "1,3"


def test_ports_and_urls() -> None:
    assert http_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert http_url("::", 8000) == "http://[::1]:8000"
    assert http_url("10.1.2.3", 80) == "http://10.1.2.3:80"
    port = free_port("127.0.0.1")
    assert port_is_free("127.0.0.1", port)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert not port_is_free("127.0.0.1", port)


def test_replicas_serve_come_back_after_a_crash_and_stop_without_leftovers(
    launcher_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    restarted: list[Replica] = []
    launcher = LocalLauncher(
        tiny_spec(launcher_model_dir, count=2), on_restart=restarted.append, log_dir=tmp_path
    )

    async def scenario() -> list[int]:
        replicas = await launcher.start()
        try:
            assert [replica.name for replica in replicas] == ["tiny-0", "tiny-1"]
            assert len({replica.url for replica in replicas}) == 2
            assert all(replica.health is ReplicaHealth.STARTING for replica in replicas)
            for replica in replicas:
                environment = psutil.Process(launcher.process_id(replica)).environ()
                assert environment["OMP_NUM_THREADS"] == environment["MKL_NUM_THREADS"] == "1"
            await asyncio.gather(*(wait_until_serving(replica) for replica in replicas))
            assert await asyncio.gather(*(complete(replica) for replica in replicas)) == ["tiny", "tiny"]

            victim, bystander = replicas
            old_pid, bystander_pid = launcher.process_id(victim), launcher.process_id(bystander)
            assert old_pid is not None
            os.kill(old_pid, signal.SIGKILL)
            await eventually(lambda: restarted == [victim], timeout=30, what="the killed replica restarts")
            assert launcher.num_restarts == 1
            assert victim.health in (ReplicaHealth.STARTING, ReplicaHealth.HEALTHY)
            assert launcher.process_id(victim) not in (None, old_pid)
            await wait_until_serving(victim)
            assert await complete(victim) == "tiny"
            assert launcher.process_id(bystander) == bystander_pid
            pids = [launcher.process_id(replica) for replica in replicas]
        finally:
            await launcher.stop(grace=10)
        assert all(replica.health is ReplicaHealth.DEAD for replica in replicas)
        assert [launcher.process_id(replica) for replica in replicas] == [None, None]
        return [pid for pid in pids if pid is not None]

    with caplog.at_level(logging.WARNING, logger="switchyard.fleet"):
        pids = asyncio.run(scenario())
    assert len(pids) == 2
    assert not [record for record in caplog.records if "did not drain" in record.getMessage()]
    assert serve_processes(launcher_model_dir) == []
    assert launcher.log_path(launcher.replicas[0]).read_text().count("--- launch") == 2
    assert launcher.log_path(launcher.replicas[1]).read_text().count("--- launch") == 1


def test_a_replica_that_cannot_start_is_left_dead_with_its_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-such-model"
    policy = RestartPolicy(initial_backoff=0.01, max_failed_starts=2, watch_interval=0.05)
    launcher = LocalLauncher(
        ReplicaSpec(str(missing), "broken", 1, threads=1), log_dir=tmp_path / "logs", restart_policy=policy
    )

    async def scenario() -> Replica:
        (replica,) = await launcher.start()
        try:
            await eventually(
                lambda: any(record.levelno == logging.ERROR for record in caplog.records),
                timeout=60,
                what="the launcher gives up",
            )
            assert replica.health is ReplicaHealth.DEAD
            assert launcher.process_id(replica) is None
        finally:
            await launcher.stop(grace=5)
        return replica

    with caplog.at_level(logging.WARNING, logger="switchyard.fleet"):
        replica = asyncio.run(scenario())
    assert launcher.num_restarts == 1  # two launches, then no more
    assert launcher.log_path(replica).read_text().count("--- launch") == 2
    (error,) = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert "broken-0 exited with code 2" in error and "stays down" in error
    assert str(missing) in error  # the server's own complaint, quoted from its log


GATEWAY_SCRIPT = """
import asyncio, sys
from switchyard.fleet.replicas.base import ReplicaSpec
from switchyard.fleet.replicas.local import LocalLauncher

async def main():
    launcher = LocalLauncher(ReplicaSpec(sys.argv[1], "tiny", 1, serve_args=tuple(sys.argv[2:]), threads=1))
    await launcher.start()
    print("started", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_servers_do_not_outlive_a_gateway_that_is_killed(launcher_model_dir: Path) -> None:
    gateway = subprocess.Popen(
        [sys.executable, "-c", GATEWAY_SCRIPT, str(launcher_model_dir), *TINY_SERVE_ARGS],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert gateway.stdout is not None and gateway.stdout.readline() == "started\n"
        (server,) = psutil.Process(gateway.pid).children()
        gateway.kill()
        gateway.wait(timeout=10)
        server.wait(timeout=30)  # psutil.TimeoutExpired if the server were left running
    finally:
        gateway.kill()
        gateway.wait()
    assert serve_processes(launcher_model_dir) == []
