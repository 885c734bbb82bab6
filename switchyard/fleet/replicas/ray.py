"""Replicas as Ray actors: each replica's devices reserved in a placement group, and an actor in it that runs
`switchyard serve` on its node and tells the gateway where it listens.

One placement group per replica holds one bundle of `cpus_per_replica` CPUs and `gpus_per_replica` GPUs:
Ray places a bundle on a single node, so a replica's GPUs (a tensor-parallel group when it asks for several)
are always on one machine, and the actor that takes the bundle gets them all as CUDA_VISIBLE_DEVICES for its
server. On a machine without GPUs a replica is just CPUs, and its torch threads are `cpus_per_replica`.

A server on the gateway's own node listens on loopback; one on another node listens on that node's address.
Its output goes to the actor's Ray worker log (and, as Ray does, to the gateway's terminal with the actor's
prefix). A server whose process exits, or whose actor dies with its node or by a kill, is replaced by a new
actor in the same placement group, with the backoff and the giving up of `supervision.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from switchyard.errors import SwitchyardError
from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.replicas.base import ReplicaLauncher, ReplicaSpec, RestartListener
from switchyard.fleet.replicas.ports import free_port, http_url
from switchyard.fleet.replicas.ray_connection import RayConnection
from switchyard.fleet.replicas.serve_command import (
    check_serve_args,
    die_with_parent,
    serve_command,
    server_environment,
)
from switchyard.fleet.replicas.supervision import (
    RestartBackoff,
    RestartPolicy,
    RunOutcome,
    exit_cause,
    notify_restart,
    watch_run,
)

logger = logging.getLogger(__name__)

ACTOR_CONCURRENCY = 3
"""Calls an actor serves at once: the long `wait_for_exit` beside `placement` and `terminate`."""


class ReplicaPlacementError(SwitchyardError):
    """The Ray cluster cannot host the replicas: no room for their bundles, or their actors fail to start."""


@dataclass(frozen=True)
class ServerPlacement:
    """Where Ray put one run of a replica, as its actor reports it."""

    url: str
    node_id: str
    node_ip: str
    gpu_ids: tuple[str, ...]
    """The GPUs Ray assigned (the server's CUDA_VISIBLE_DEVICES); empty on CPUs."""
    actor_pid: int
    server_pid: int


class ReplicaServer:
    """The actor: runs one replica's `switchyard serve` on its node until told to stop or the server exits."""

    def __init__(self, spec: ReplicaSpec, threads: int, gateway_ip: str) -> None:
        # Created on the actor's main thread, which lives as long as the actor: the server dies with it.
        gpu_ids = tuple(str(gpu) for gpu in ray.get_gpu_ids())
        node_ip = ray.util.get_node_ip_address()
        host = "127.0.0.1" if node_ip == gateway_ip else node_ip
        port = free_port(host)
        self._process = subprocess.Popen(
            serve_command(spec, host, port),
            stdin=subprocess.DEVNULL,
            env=server_environment(threads, gpu_ids),
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._placement = ServerPlacement(
            url=http_url(host, port),
            node_id=ray.get_runtime_context().get_node_id(),
            node_ip=node_ip,
            gpu_ids=gpu_ids,
            actor_pid=os.getpid(),
            server_pid=self._process.pid,
        )

    def placement(self) -> ServerPlacement:
        return self._placement

    def wait_for_exit(self) -> int:
        """Block until the server exits; its return code (negative: the signal that killed it)."""
        return self._process.wait()

    def terminate(self, grace: float) -> int:
        """SIGTERM (the server drains), then SIGKILL after `grace` seconds; the return code."""
        self._process.send_signal(signal.SIGTERM)
        try:
            return self._process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return self._process.wait()


ReplicaServerActor = ray.remote(ReplicaServer)


@dataclass
class RayServer:
    """One replica's placement group and its current actor; the `Replica` object outlives the actors."""

    replica: Replica
    group: PlacementGroup
    actor: Any
    placement: ServerPlacement


class RayLauncher(ReplicaLauncher):
    """Runs a pool's replicas as Ray actors, one placement group each, and keeps them running."""

    def __init__(
        self,
        spec: ReplicaSpec,
        address: str | None = None,
        gpus_per_replica: float = 0,
        cpus_per_replica: float = 1,
        on_restart: RestartListener | None = None,
        *,
        restart_policy: RestartPolicy | None = None,
        startup_timeout: float = 120.0,
        connection: RayConnection | None = None,
    ) -> None:
        """`connection`: one shared with other pools (the caller closes it); by default the launcher opens
        one to `address` (None: a local Ray instance) and closes it when it stops."""
        check_serve_args(spec)
        if cpus_per_replica <= 0 or gpus_per_replica < 0:
            raise ValueError("a replica needs some CPUs (cpus_per_replica > 0) and no negative GPU count")
        if gpus_per_replica > 1 and not float(gpus_per_replica).is_integer():
            raise ValueError(f"more than one GPU per replica must be whole GPUs, not {gpus_per_replica}")
        self.spec = spec
        self.gpus_per_replica = gpus_per_replica
        self.cpus_per_replica = cpus_per_replica
        self.on_restart = on_restart
        self.restart_policy = restart_policy or RestartPolicy()
        self.startup_timeout = startup_timeout
        self._servers: list[RayServer] = []
        self._supervisors: list[asyncio.Task[None]] = []
        self._restarts = 0
        self._stopping = False
        self._connection = connection or RayConnection(address)
        self._closes_connection = connection is None
        self._gateway_ip = ""

    @property
    def bundle(self) -> dict[str, float]:
        """One replica's resources: a placement group's only bundle, and what its actor asks for."""
        bundle = {"CPU": float(self.cpus_per_replica)}
        if self.gpus_per_replica:
            bundle["GPU"] = float(self.gpus_per_replica)
        return bundle

    @property
    def threads_per_replica(self) -> int:
        return self.spec.threads or max(1, math.floor(self.cpus_per_replica))

    @property
    def num_restarts(self) -> int:
        return self._restarts

    @property
    def replicas(self) -> list[Replica]:
        return [server.replica for server in self._servers]

    def placement(self, replica: Replica) -> ServerPlacement:
        """Where the replica's current run is: its URL, node, GPUs and processes."""
        return self._server_of(replica).placement

    def placement_group(self, replica: Replica) -> PlacementGroup:
        return self._server_of(replica).group

    async def start(self) -> list[Replica]:
        if self._servers:
            raise RuntimeError("this launcher has already started its replicas")
        self._connection.open()
        self._gateway_ip = ray.util.get_node_ip_address()
        groups = [placement_group([self.bundle], strategy="STRICT_PACK") for _ in range(self.spec.count)]
        try:
            launched = await self._launch_all(groups)
        except BaseException:
            for group in groups:
                remove_placement_group(group)
            self._disconnect()
            raise
        for index, (group, (actor, placement)) in enumerate(zip(groups, launched, strict=True)):
            name = f"{self.spec.served_name}-{index}"
            replica = Replica(name=name, url=placement.url, model=self.spec.served_name)
            self._servers.append(RayServer(replica, group, actor, placement))
            logger.info("replica %s is on node %s at %s", name, placement.node_ip, placement.url)
        self._supervisors = [
            asyncio.create_task(self._supervise(server), name=f"supervise {server.replica.name}")
            for server in self._servers
        ]
        return self.replicas

    async def stop(self, grace: float) -> None:
        self._stopping = True
        for supervisor in self._supervisors:
            supervisor.cancel()
        await asyncio.gather(*self._supervisors, return_exceptions=True)
        for server in self._servers:
            server.replica.health = ReplicaHealth.DRAINING
        terminations = [_resolve(server.actor.terminate.remote(grace)) for server in self._servers]
        results = await asyncio.gather(
            *(_within(grace + 10, done) for done in terminations), return_exceptions=True
        )
        for server, result in zip(self._servers, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, RayActorError):
                logger.warning("replica %s did not stop cleanly: %r", server.replica.name, result)
            _kill(server.actor)
            remove_placement_group(server.group)
            server.replica.health = ReplicaHealth.DEAD
        self._disconnect()

    def _disconnect(self) -> None:
        if self._closes_connection:
            self._connection.close()

    async def _launch_all(self, groups: list[PlacementGroup]) -> list[tuple[Any, ServerPlacement]]:
        try:
            await asyncio.wait_for(
                asyncio.gather(*(_resolve(group.ready()) for group in groups)), self.startup_timeout
            )
        except TimeoutError:
            raise ReplicaPlacementError(
                f"the Ray cluster found no room in {self.startup_timeout:.0f} s for {self.spec.count} "
                f"replica(s) of {self.bundle} each (available: {ray.available_resources()})"
            ) from None
        return list(await asyncio.gather(*(self._launch(group) for group in groups)))

    async def _launch(self, group: PlacementGroup) -> tuple[Any, ServerPlacement]:
        """A new actor in the group, once it has started its server (the server is still loading)."""
        actor = ReplicaServerActor.options(  # type: ignore[attr-defined]
            num_cpus=self.cpus_per_replica,
            num_gpus=self.gpus_per_replica,
            max_concurrency=ACTOR_CONCURRENCY,
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0),
        ).remote(self.spec, self.threads_per_replica, self._gateway_ip)
        try:
            placement = await _within(self.startup_timeout, _resolve(actor.placement.remote()))
        except (RayError, TimeoutError) as error:
            _kill(actor)
            raise ReplicaPlacementError(f"a replica's actor did not start: {error}") from error
        return actor, placement

    def _server_of(self, replica: Replica) -> RayServer:
        for server in self._servers:
            if server.replica is replica:
                return server
        raise KeyError(f"{replica.name} is not one of this launcher's replicas")

    async def _supervise(self, server: RayServer) -> None:
        backoff = RestartBackoff(self.restart_policy)
        outcome = await self._watch(server)
        while not self._stopping:
            server.replica.health = ReplicaHealth.DEAD
            _kill(server.actor)
            delay = backoff.delay_after(outcome)
            if delay is None:
                logger.error(
                    "replica %s %s; it died before becoming healthy %d times in a row, so it stays down. "
                    "Its server's output is in the Ray worker logs of node %s",
                    server.replica.name,
                    outcome.cause,
                    self.restart_policy.max_failed_starts,
                    server.placement.node_ip,
                )
                return
            logger.warning(
                "replica %s %s after %.0f s; restarting it in %.1f s",
                server.replica.name,
                outcome.cause,
                outcome.uptime,
                delay,
            )
            await asyncio.sleep(delay)
            try:
                server.actor, server.placement = await self._launch(server.group)
            except ReplicaPlacementError as error:
                outcome = RunOutcome(f"could not be launched ({error})", 0.0, became_healthy=False)
                continue
            server.replica.url = server.placement.url
            server.replica.health = ReplicaHealth.STARTING
            self._restarts += 1
            notify_restart(self.on_restart, server.replica)
            outcome = await self._watch(server)

    async def _watch(self, server: RayServer) -> RunOutcome:
        actor = server.actor

        async def ended() -> str:
            try:
                return exit_cause(await _resolve(actor.wait_for_exit.remote()))
            except RayActorError as error:
                return f"lost its Ray actor ({type(error).__name__})"

        return await watch_run(server.replica, ended(), self.restart_policy)


async def _resolve(ref: Any) -> Any:
    """An ObjectRef's value, awaited on the event loop rather than blocking it."""
    return await ref


async def _within(seconds: float, awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, seconds)


def _kill(actor: Any) -> None:
    with contextlib.suppress(RayError, ValueError):
        ray.kill(actor, no_restart=True)
