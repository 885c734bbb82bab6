"""The admission queue's fairness through a real gateway with tenancy: a tenant that arrives behind another's
queued requests is let in before the rest of them (the tenant reaches the queue from its key)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from fleet_harness import gateway_config, start_gateway, wait_for
from recording_worker import RecordingWorker

from switchyard.fleet.replica import ReplicaHealth
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.store import TenantStore


def chat(base_url: str, key: str) -> int:
    body = {"model": "held", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, headers=headers, timeout=60).status_code


def test_a_quiet_tenant_goes_ahead_of_a_flooding_tenants_queued_requests(tmp_path: Path) -> None:
    db = tmp_path / "tenants.db"
    store = TenantStore(open_database(db))
    flood, quiet = store.add("flood").key, store.add("quiet").key
    gate = threading.Event()
    worker = RecordingWorker(gate=gate)
    config = gateway_config({"held": [worker.url]}, tenants_db=str(db), max_in_flight_per_replica=1)
    gateway = start_gateway(config)
    try:
        pool = gateway.runtime.pools["held"]
        wait_for(lambda: pool.replicas[0].health is ReplicaHealth.HEALTHY, 60, "the worker healthy")
        with ThreadPoolExecutor(max_workers=4) as executor:
            sent = [executor.submit(chat, gateway.base_url, flood)]
            wait_for(lambda: len(worker.bodies) == 1, 30, "the first request at the worker")
            sent += [executor.submit(chat, gateway.base_url, flood) for _ in range(2)]
            wait_for(lambda: pool.admission.waiting("flood") == 2, 30, "the flood's requests queued")
            sent.append(executor.submit(chat, gateway.base_url, quiet))
            wait_for(lambda: pool.admission.waiting("quiet") == 1, 30, "the quiet tenant's request queued")
            gate.set()
            assert [future.result(timeout=60) for future in sent] == [200] * 4
        # first in first out would have been flood, flood, flood, quiet
        assert [body["user"] for body in worker.bodies] == ["flood", "flood", "quiet", "flood"]
    finally:
        gate.set()
        gateway.stop()
        worker.stop()
