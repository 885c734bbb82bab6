"""The fleet's admin API: a running server joins a pool and leaves it over HTTP (how a platform's autoscaler
registers its replicas), only with the operators' key; bad requests get OpenAI-shaped errors."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fleet_harness import Replicas, RunningGateway, gateway_config, start_gateway, wait_for

KEY = "fleet-operator"


@pytest.fixture(scope="module")
def gateway(replicas: Replicas) -> Iterator[RunningGateway]:
    running = start_gateway(gateway_config({"tiny": [replicas.a.url]}, api_key=KEY))
    wait_for(
        lambda: all(row["health"] == "healthy" for row in rows(running).values()), 60, "the worker healthy"
    )
    yield running
    running.stop()


def rows(gateway: RunningGateway) -> dict[str, dict]:  # type: ignore[type-arg]
    answer = httpx.get(f"{gateway.base_url}/v1/fleet/replicas", headers={"authorization": f"Bearer {KEY}"})
    return {row["name"]: row for row in answer.json()["data"]}


def test_a_worker_joins_takes_traffic_and_leaves(gateway: RunningGateway, replicas: Replicas) -> None:
    with gateway.http(headers={"authorization": f"Bearer {KEY}"}) as http:
        added = http.post(
            "/v1/fleet/pools/tiny/workers", json={"url": replicas.b.url + "/", "name": "autoscaled-1"}
        )
        assert added.status_code == 201, added.text
        assert added.json()["url"] == replicas.b.url and added.json()["pool"] == "tiny"
        wait_for(lambda: rows(gateway)["autoscaled-1"]["health"] == "healthy", 30, "the new worker healthy")
        client = gateway.client(api_key=KEY)
        for _ in range(6):  # round robin: both workers answer
            client.completions.create(model="tiny", prompt="hi", max_tokens=2)
        assert set(rows(gateway)) == {"tiny-worker-0", "autoscaled-1"}

        removed = http.delete("/v1/fleet/pools/tiny/workers/autoscaled-1")
        assert removed.status_code == 200 and removed.json()["deleted"] is True
        assert set(rows(gateway)) == {"tiny-worker-0"}
        assert client.completions.create(model="tiny", prompt="hi", max_tokens=2).choices  # still served


def test_bad_changes_are_refused_by_name(gateway: RunningGateway, replicas: Replicas) -> None:
    with gateway.http(headers={"authorization": f"Bearer {KEY}"}) as http:
        duplicate = http.post("/v1/fleet/pools/tiny/workers", json={"url": replicas.a.url})
        assert duplicate.status_code == 409 and "already serves" in duplicate.json()["error"]["message"]
        assert http.post("/v1/fleet/pools/nope/workers", json={"url": replicas.b.url}).status_code == 404
        bad_url = http.post("/v1/fleet/pools/tiny/workers", json={"url": "ftp://x"})
        assert bad_url.status_code == 400 and bad_url.json()["error"]["param"] == "url"
        suffix = http.post("/v1/fleet/pools/tiny/workers", json={"url": replicas.b.url + "/v1"})
        assert suffix.status_code == 400 and "/v1" in suffix.json()["error"]["message"]
        assert http.post("/v1/fleet/pools/tiny/workers", json=[1]).status_code == 400
        assert (
            http.post("/v1/fleet/pools/tiny/workers", json={"url": replicas.b.url, "name": "a b"}).status_code
            == 400
        )
        missing = http.delete("/v1/fleet/pools/tiny/workers/nobody")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "worker_not_found"
    assert (
        httpx.post(f"{gateway.base_url}/v1/fleet/pools/tiny/workers", json={"url": "http://x:1"}).status_code
        == 401
    )


def test_a_gateway_without_a_key_refuses_pool_changes(replicas: Replicas) -> None:
    open_gateway = start_gateway(gateway_config({"tiny": [replicas.a.url]}))
    try:
        with open_gateway.http() as http:
            refused = http.post("/v1/fleet/pools/tiny/workers", json={"url": replicas.b.url})
        assert refused.status_code == 403 and "--api-key" in refused.json()["error"]["message"]
    finally:
        open_gateway.stop()
