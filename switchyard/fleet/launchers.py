"""Which launcher a pool's replicas get: processes on this machine, or actors on a Ray cluster.

The launcher modules are imported only when a pool asks for them, so a fleet of --worker URLs loads no Ray.
Ray allows one connection per process: pools placed on Ray share one, opened by the first and closed once
every pool's launcher has stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from switchyard.fleet.config import LaunchConfig
from switchyard.fleet.replicas.base import ReplicaLauncher, RestartListener

if TYPE_CHECKING:
    from switchyard.fleet.replicas.ray_connection import RayConnection


class LauncherFactory(Protocol):
    def create(self, launch: LaunchConfig, on_restart: RestartListener) -> ReplicaLauncher:
        """The launcher of one pool (its replicas not yet started)."""

    def close(self) -> None:
        """Release what the launchers shared, after every one of them has stopped."""


class Launchers:
    """The launchers `switchyard fleet serve` uses: LocalLauncher, or RayLauncher on a shared connection."""

    def __init__(self) -> None:
        self._ray: RayConnection | None = None

    def create(self, launch: LaunchConfig, on_restart: RestartListener) -> ReplicaLauncher:
        if launch.launcher == "ray":
            from switchyard.fleet.replicas.ray import RayLauncher
            from switchyard.fleet.replicas.ray_connection import RayConnection

            if self._ray is None:
                self._ray = RayConnection(launch.ray_address)
            return RayLauncher(
                launch.spec,
                address=launch.ray_address,
                gpus_per_replica=launch.gpus_per_replica,
                cpus_per_replica=launch.cpus_per_replica,
                on_restart=on_restart,
                connection=self._ray,
            )
        from switchyard.fleet.replicas.local import LocalLauncher

        return LocalLauncher(launch.spec, on_restart=on_restart)

    def close(self) -> None:
        if self._ray is not None:
            self._ray.close()
            self._ray = None
