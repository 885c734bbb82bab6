"""Replicas the gateway launches read the tenants' fair-share weights: a real `switchyard serve` started with
the weights file the runtime wrote, which it must accept to come up."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from replica_probes import TINY_SERVE_ARGS, tiny_spec, wait_until_serving

from switchyard.fleet.config import FleetConfig, LaunchConfig, PoolConfig
from switchyard.fleet.launchers import Launchers
from switchyard.fleet.replicas.base import ReplicaLauncher, RestartListener
from switchyard.fleet.runtime import FleetRuntime
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.store import TenantStore
from switchyard.server.tenants import load_tenants


@dataclass
class RecordingLaunchers:
    """The real launchers, remembering what each pool was launched with."""

    launched: list[LaunchConfig] = field(default_factory=list)
    real: Launchers = field(default_factory=Launchers)

    def create(self, launch: LaunchConfig, on_restart: RestartListener) -> ReplicaLauncher:
        self.launched.append(launch)
        return self.real.create(launch, on_restart)

    def close(self) -> None:
        self.real.close()


def test_launched_replicas_get_the_tenants_weights(launcher_model_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "tenants.db"
    store = TenantStore(open_database(db))
    store.add("alice", weight=3.0)
    store.add("bob", weight=0.5)
    pool = PoolConfig(model="tiny", launch=LaunchConfig(spec=tiny_spec(launcher_model_dir, 1)))
    config = FleetConfig(pools=(pool,), port=0, tenants_db=str(db))
    launchers = RecordingLaunchers()
    runtime = FleetRuntime(config, launchers)

    async def scenario() -> None:
        await runtime.start()
        try:
            (launch,) = launchers.launched
            args = launch.spec.serve_args
            assert args[: len(TINY_SERVE_ARGS)] == TINY_SERVE_ARGS and args[-2] == "--tenants"
            assert load_tenants(args[-1]).weights == {"alice": 3.0, "bob": 0.5}
            (replica,) = runtime.pools["tiny"].replicas
            await wait_until_serving(replica)  # the server accepted the file
        finally:
            await runtime.stop(grace=5)

    asyncio.run(scenario())
    assert not Path(launchers.launched[0].spec.serve_args[-1]).exists()  # removed with the runtime
