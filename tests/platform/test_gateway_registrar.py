"""Serving replicas join a fleet gateway's pool: the registrar against a real gateway over its admin API, and
the autoscaler taking a leaving replica out of the gateway before it cancels its job."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from switchyard.fleet.config import FleetConfig, PoolConfig
from switchyard.fleet.launch import build_gateway_server
from switchyard.fleet.replica import ReplicaLoad
from switchyard.platform.autoscaler import (
    AutoscalerSettings,
    ScaleAction,
    ServingAutoscaler,
    ServingPoolSpec,
    serve_command,
)
from switchyard.platform.gateway_registrar import GatewayRegistrar, GatewayTarget, worker_name
from switchyard.platform.job_store import JobRecord
from switchyard.platform.jobs import Job, JobState

KEY = "operators"


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    config = FleetConfig(
        pools=(PoolConfig(model="chat", workers=("http://127.0.0.1:9",)),),
        host="127.0.0.1",
        port=0,
        api_key=KEY,
    )
    server = build_gateway_server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=30)


def workers(url: str) -> dict[str, str]:
    rows = httpx.get(f"{url}/v1/fleet/replicas", headers={"authorization": f"Bearer {KEY}"}).json()["data"]
    return {row["name"]: row["url"] for row in rows}


def test_the_registrar_adds_and_removes_only_its_own_workers(gateway_url: str) -> None:
    registrar = GatewayRegistrar(GatewayTarget(gateway_url, KEY))
    one, two = worker_name("chat", "job1", 0), worker_name("chat", "job2", 0)
    registrar.sync("chat", "chat", {one: "http://127.0.0.1:8101", two: "http://127.0.0.1:8102"})
    assert workers(gateway_url) == {
        "chat-worker-0": "http://127.0.0.1:9",  # the operator's own worker
        one: "http://127.0.0.1:8101",
        two: "http://127.0.0.1:8102",
    }
    registrar.sync("chat", "chat", {two: "http://127.0.0.1:8102"})  # job1 ended
    assert workers(gateway_url) == {"chat-worker-0": "http://127.0.0.1:9", two: "http://127.0.0.1:8102"}
    registrar.sync("chat", "chat", {})
    assert workers(gateway_url) == {"chat-worker-0": "http://127.0.0.1:9"}
    GatewayRegistrar(GatewayTarget("http://127.0.0.1:9", KEY, timeout_s=0.5)).sync("chat", "chat", {one: "x"})
    wrong_key = GatewayRegistrar(GatewayTarget(gateway_url, "not-the-key"))
    wrong_key.sync("chat", "chat", {one: "http://127.0.0.1:8101"})  # refused: logged, not raised
    assert one not in workers(gateway_url)


@dataclass
class RecordingControlPlane:
    records: list[JobRecord]
    events: list[str] = field(default_factory=list)

    def jobs(self) -> list[JobRecord]:
        return self.records

    def cancel(self, job_id: str) -> None:
        self.events.append(f"cancel {job_id}")


@dataclass
class RecordingRegistrar:
    events: list[str]

    def sync(self, platform_pool: str, gateway_pool: str, endpoints: dict[str, str]) -> None:
        self.events.append(f"sync {sorted(endpoints)}")


def test_a_leaving_replica_leaves_the_gateway_before_its_job_is_cancelled() -> None:
    pool = ServingPoolSpec(
        "chat", "serving", serve_command("m", "chat"), min_replicas=1, max_replicas=3, gateway_pool="chat"
    )
    records = [
        JobRecord(
            Job(f"j{i}", pool.replica_spec(), JobState.RUNNING, submitted_at=i), endpoints=(f"http://h:{i}",)
        )
        for i in (1, 2)
    ]
    control = RecordingControlPlane(records)
    autoscaler = ServingAutoscaler(
        control,  # type: ignore[arg-type]
        [pool],
        AutoscalerSettings(down_after=1),
        scrape=lambda url, timeout: "",
        gateway=RecordingRegistrar(control.events),  # type: ignore[arg-type]
    )
    autoscaler._loads = lambda record: [ReplicaLoad()]  # type: ignore[method-assign]
    assert autoscaler.tick() == {"chat": ScaleAction.DOWN}
    assert control.events == [f"sync {[worker_name('chat', 'j1', 0)]}", "cancel j2"]
