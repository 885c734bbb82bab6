"""The runtime's side of the launcher interface: launched replicas join their pool, a restart reaches the
pool's policy and the metrics, and shutdown stops the launchers with the drain grace.

The launchers themselves (local processes, Ray actors) have their own tests; here a minimal launcher
supervises one of the package's real replica processes the way they do, on the gateway's event loop: when the
process dies it marks the replica dead, starts the process again, marks it starting and reports the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import httpx
from fleet_harness import ReplicaProcess, Replicas, metric, wait_for

from switchyard.fleet.config import BreakerConfig, FleetConfig, LaunchConfig, PoolConfig
from switchyard.fleet.launch import build_gateway_server
from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.replicas.base import ReplicaLauncher, ReplicaSpec, RestartListener


class SupervisingOne(ReplicaLauncher):
    def __init__(self, process: ReplicaProcess, on_restart: RestartListener) -> None:
        self.process = process
        self.on_restart = on_restart
        self.replica = Replica(name="tiny-launched-0", url=process.url, model="tiny")
        self.restarts = 0
        self.stopped_with: float | None = None
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> list[Replica]:
        self._watch = asyncio.create_task(self._supervise())
        return [self.replica]

    async def _supervise(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            assert self.process.process is not None
            if self.process.process.poll() is None:
                continue
            self.replica.health = ReplicaHealth.DEAD
            self.process.start()
            self.replica.health = ReplicaHealth.STARTING
            self.restarts += 1
            self.on_restart(self.replica)

    async def stop(self, grace: float) -> None:
        self.stopped_with = grace
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch

    @property
    def num_restarts(self) -> int:
        return self.restarts


def test_launched_replicas_join_restart_and_stop_with_the_fleet(replicas: Replicas) -> None:
    launched: list[SupervisingOne] = []
    closed: list[bool] = []

    class Factory:
        def create(self, launch: LaunchConfig, on_restart: RestartListener) -> ReplicaLauncher:
            assert (launch.spec.served_name, launch.spec.count) == ("tiny", 1)
            launched.append(SupervisingOne(replicas.b, on_restart))
            return launched[0]

        def close(self) -> None:
            closed.append(launched[0].stopped_with is not None)  # after the launchers stopped

    spec = ReplicaSpec(model="tiny-model-folder", served_name="tiny", count=1)
    config = FleetConfig(
        pools=(PoolConfig(model="tiny", launch=LaunchConfig(spec=spec)),),
        host="127.0.0.1",
        port=0,
        health_interval=0.2,
        breaker=BreakerConfig(base_backoff=0.2, max_backoff=1.0),
        shutdown_grace=7.0,
    )
    server = build_gateway_server(config, launcher_factory=Factory())
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, what="the gateway started")
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        pool = server.runtime.pools["tiny"]
        (launcher,) = launched
        assert pool.replicas == [launcher.replica]
        wait_for(
            lambda: launcher.replica.health is ReplicaHealth.HEALTHY, 120, "the launched replica healthy"
        )
        forgotten: list[Replica] = []
        pool.policy.on_replica_removed = forgotten.append  # type: ignore[method-assign]

        replicas.b.kill()  # a crash: the launcher restarts it
        wait_for(lambda: launcher.restarts == 1, 60, "the restart")
        assert forgotten == [launcher.replica]  # the restarted replica's cache is empty
        wait_for(
            lambda: launcher.replica.health is ReplicaHealth.HEALTHY, 180, "the restarted replica healthy"
        )
        text = httpx.get(f"{base}/metrics", timeout=30).text
        assert metric(text, "switchyard:fleet_replica_restarts_total", pool="tiny") == 1
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
        assert httpx.post(f"{base}/v1/completions", json=body, timeout=60).status_code == 200
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        replicas.b.wait_healthy()
    assert launched[0].stopped_with == 7.0 and closed == [True]
