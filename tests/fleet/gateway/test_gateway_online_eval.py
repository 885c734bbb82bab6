"""Online evaluation through a real gateway: sampled requests are logged with their answers, feedback is tied
to them, and a stream's logged response is the text the caller read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_harness import Replicas, RunningGateway, gateway_config, metric, start_gateway, wait_for

from switchyard.fleet.online_eval.config import OnlineEvalConfig
from switchyard.fleet.online_eval.log import OnlineEvalLog, StoredVerdict
from switchyard.fleet.replica import ReplicaHealth
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.store import TenantStore

CHAT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def gateway(replicas: Replicas, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    log = tmp_path_factory.mktemp("online-eval") / "log.db"
    config = gateway_config(
        {"tiny": [replicas.a.url]}, online_eval=OnlineEvalConfig(sample=1.0, log=str(log))
    )
    running = start_gateway(config)
    running.wait_all_healthy()
    yield running
    running.stop()


def _logged(gateway: RunningGateway, request_id: str) -> list:
    recorder = gateway.runtime.online_eval
    assert recorder is not None
    reader = OnlineEvalLog(Path(recorder.log.path))
    try:
        return [e for e in reader.exchanges() if e.request_id == request_id]
    finally:
        reader.close()


def test_a_sampled_request_is_logged_with_its_answer(gateway: RunningGateway) -> None:
    with gateway.http() as http:
        answer = http.post(
            "/v1/chat/completions",
            json={"model": "tiny", "messages": CHAT, "max_tokens": 4},
            headers={"x-request-id": "logged-1"},
        )
    assert answer.status_code == 200
    wait_for(lambda: bool(_logged(gateway, "logged-1")), what="the exchange in the log")
    (exchange,) = _logged(gateway, "logged-1")
    assert exchange.pool == "tiny" and exchange.endpoint == "chat" and exchange.status == 200
    assert json.loads(exchange.request)["max_tokens"] == 4
    assert exchange.response == answer.text
    assert exchange.usage.output_tokens == 4 and exchange.latency > 0 and not exchange.shadow


def test_a_stream_is_logged_as_the_text_the_caller_read(gateway: RunningGateway) -> None:
    client = gateway.client()
    stream = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=5,
        stream=True,
        extra_headers={"x-request-id": "logged-stream"},
        extra_body={"ignore_eos": True},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    wait_for(lambda: bool(_logged(gateway, "logged-stream")), what="the stream in the log")
    (exchange,) = _logged(gateway, "logged-stream")
    assert exchange.response == text and text
    assert exchange.usage.output_tokens >= 1  # counted from the events (the client asked for no usage)


def test_feedback_ties_a_rating_to_a_logged_request(gateway: RunningGateway) -> None:
    with gateway.http() as http:
        http.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": "abc", "max_tokens": 2},
            headers={"x-request-id": "rated-1"},
        ).raise_for_status()
        given = http.post("/v1/feedback", json={"request_id": "rated-1", "rating": 1, "correction": "better"})
        assert given.status_code == 200, given.text
        unknown = http.post("/v1/feedback", json={"request_id": "never-sent", "rating": -1})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "request_not_found"
        out_of_range = http.post("/v1/feedback", json={"request_id": "rated-1", "rating": 5})
        assert out_of_range.status_code == 400 and out_of_range.json()["error"]["param"] == "rating"
    recorder = gateway.runtime.online_eval
    assert recorder is not None
    (stored,) = recorder.log.feedback("rated-1")
    assert stored.rating == 1.0 and stored.correction == "better" and stored.tenant == "default"


def test_metrics_show_logged_requests_ratings_and_the_judges_pass_rate(gateway: RunningGateway) -> None:
    def logged() -> float:
        return metric(
            gateway.metrics(), "switchyard:fleet_online_eval_logged_total", pool="tiny", shadow="false"
        )

    before = logged()
    with gateway.http() as http:
        for request_id, rating in (("metered-1", 1.0), ("metered-2", -0.5)):
            http.post(
                "/v1/completions",
                json={"model": "tiny", "prompt": "abc", "max_tokens": 2},
                headers={"x-request-id": request_id},
            ).raise_for_status()
            http.post("/v1/feedback", json={"request_id": request_id, "rating": rating}).raise_for_status()
    text = gateway.metrics()
    assert logged() == before + 2
    assert (
        metric(text, "switchyard:fleet_online_eval_latency_seconds_count", pool="tiny", shadow="false") >= 2
    )
    ratings = metric(text, "switchyard:fleet_online_eval_ratings_total", pool="tiny")
    rating_sum = metric(text, "switchyard:fleet_online_eval_rating_sum", pool="tiny")
    assert ratings >= 2 and rating_sum == pytest.approx(1.0 + 1.0 - 0.5)  # rated-1 gave 1 in the test above
    recorder = gateway.runtime.online_eval
    assert recorder is not None
    for request_id, passed in (("metered-1", True), ("metered-2", False)):
        recorder.log.add_verdict(StoredVerdict(request_id, False, "judge-m", passed, float(passed), "", 0.0))
    text = gateway.metrics()
    assert metric(text, "switchyard:fleet_online_eval_judged", pool="tiny", judge="judge-m") == 2
    assert metric(text, "switchyard:fleet_online_eval_judge_passed", pool="tiny", judge="judge-m") == 1


def test_with_tenancy_each_tenant_opts_in_and_rates_only_its_own(
    replicas: Replicas, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("online-tenancy")
    store = TenantStore(open_database(folder / "tenants.db"))
    acme, beta = store.add("acme").key, store.add("beta").key
    config = gateway_config(
        {"tiny": [replicas.a.url]},
        tenants_db=str(folder / "tenants.db"),
        online_eval=OnlineEvalConfig(sample=0.0, tenants={"acme": 1.0}, log=str(folder / "log.db")),
    )
    running = start_gateway(config)
    try:
        replicas_now = [replica for pool in running.runtime.pools.values() for replica in pool.replicas]
        wait_for(
            lambda: all(r.health is ReplicaHealth.HEALTHY for r in replicas_now), what="the replica healthy"
        )
        with running.http() as http:
            for key, request_id in ((acme, "acme-1"), (beta, "beta-1")):
                http.post(
                    "/v1/completions",
                    json={"model": "tiny", "prompt": "abc", "max_tokens": 2},
                    headers={"x-request-id": request_id, "authorization": f"Bearer {key}"},
                ).raise_for_status()

            def rate(key: str, request_id: str) -> int:
                answer = http.post(
                    "/v1/feedback",
                    json={"request_id": request_id, "rating": 0.5},
                    headers={"authorization": f"Bearer {key}"},
                )
                return answer.status_code

            assert rate(beta, "beta-1") == 404  # beta did not opt in: its request was not logged
            assert rate(beta, "acme-1") == 404  # another tenant's request looks unknown
            assert rate(acme, "acme-1") == 200

            # the tenants store's own rate wins over the TOML's, at the next request, without a restart
            store.set_limits("beta", eval_sample=1.0)
            store.set_limits("acme", eval_sample=0.0)
            for key, request_id in ((acme, "acme-2"), (beta, "beta-2")):
                http.post(
                    "/v1/completions",
                    json={"model": "tiny", "prompt": "abc", "max_tokens": 2},
                    headers={"x-request-id": request_id, "authorization": f"Bearer {key}"},
                ).raise_for_status()
            assert rate(beta, "beta-2") == 200
            assert rate(acme, "acme-2") == 404
        (exchange,) = _logged(running, "acme-1")
        assert exchange.tenant == "acme" and "user" not in json.loads(exchange.request)
    finally:
        running.stop()
