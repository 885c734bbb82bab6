"""The gateway speaks the OpenAI API as a replica does: the official client through it, two models, errors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import httpx
import openai
import pytest
from fleet_harness import Replicas, RunningGateway, gateway_config, metric, start_gateway, wait_for

from switchyard.fleet.policies import RouteDecision, RouteRequest, RoutingPolicy, make_policy
from switchyard.fleet.replica import Replica

CHAT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def gateway(replicas: Replicas) -> Iterator[RunningGateway]:
    """Two pools: `tiny` on replicas a and b, `tiny-qwen` on the qwen replica."""
    config = gateway_config({"tiny": [replicas.a.url, replicas.b.url], "tiny-qwen": [replicas.qwen.url]})
    running = start_gateway(config)
    running.wait_all_healthy()
    yield running
    running.stop()


@pytest.fixture
def client(gateway: RunningGateway) -> openai.OpenAI:
    return gateway.client()


def test_chat_and_completions_through_the_gateway(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=5)
    assert chat.model == "tiny"
    assert chat.usage is not None and chat.usage.completion_tokens == 5
    completion = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 4


def test_streams_pass_through(client: openai.OpenAI, gateway: RunningGateway) -> None:
    stream = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
    completion_stream = client.completions.create(
        model="tiny", prompt="abc", max_tokens=3, stream=True, extra_body={"ignore_eos": True}
    )
    choices = [choice for chunk in completion_stream for choice in chunk.choices]
    assert choices[-1].finish_reason == "length"


def test_first_event_arrives_while_the_replica_still_generates(gateway: RunningGateway) -> None:
    """Not buffered: the client reads the first event while the gateway still counts the request in flight
    at its replica (a long generation; a gateway that buffered would hand over nothing before the end)."""
    body = {"model": "tiny", "prompt": "abc", "max_tokens": 200, "stream": True, "ignore_eos": True}
    pool = gateway.runtime.pools["tiny"]
    with gateway.http() as http, http.stream("POST", "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data:"))
        assert '"text"' in first
        assert sum(replica.in_flight for replica in pool.replicas) == 1
        rest = [line for line in lines if line.startswith("data:")]
    assert rest[-1] == "data: [DONE]"
    assert len(rest) >= 100
    wait_for(lambda: sum(replica.in_flight for replica in pool.replicas) == 0, what="the slot returned")


def test_responses_api_streams_named_events(client: openai.OpenAI) -> None:
    response = client.responses.create(model="tiny", input="Hello", max_output_tokens=4)
    assert response.status in ("completed", "incomplete")
    events = list(client.responses.create(model="tiny", input="Hello", max_output_tokens=4, stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")


def test_two_models_are_two_pools(client: openai.OpenAI) -> None:
    assert sorted(model.id for model in client.models.list()) == ["tiny", "tiny-qwen"]
    assert client.models.retrieve("tiny-qwen").id == "tiny-qwen"
    qwen = client.chat.completions.create(model="tiny-qwen", messages=CHAT, max_tokens=3)
    assert qwen.model == "tiny-qwen"
    llama = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=3)
    assert llama.model == "tiny"


def test_unknown_model_is_404_listing_the_pools(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-9", messages=CHAT, max_tokens=3)
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "`tiny`" in error["message"] and "`tiny-qwen`" in error["message"]
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")


def test_request_id_reaches_the_replica_and_comes_back(client: openai.OpenAI) -> None:
    """The replica echoes the id it was sent and the gateway passes its header back, so the client's own id
    coming back shows it reached the replica."""
    raw = client.completions.with_raw_response.create(
        model="tiny", prompt="hi", max_tokens=2, extra_headers={"x-request-id": "trace-1234"}
    )
    assert raw.headers["x-request-id"] == "trace-1234"
    generated = client.completions.with_raw_response.create(model="tiny", prompt="hi", max_tokens=2)
    assert len(generated.headers["x-request-id"]) >= 16


def test_replica_errors_pass_straight_back(client: openai.OpenAI, gateway: RunningGateway) -> None:
    """A 400 is the request's fault: the replica's own error, not retried, replica not penalised."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model="tiny", prompt="hi", max_tokens=2, temperature=-1)
    assert isinstance(raised.value.body, dict) and "temperature" in raised.value.body["message"]
    assert all(row["health"] == "healthy" for row in gateway.replicas().values())
    assert metric(gateway.metrics(), "switchyard:fleet_retries_total") == 0


def test_malformed_bodies_get_openai_errors(gateway: RunningGateway) -> None:
    with gateway.http() as http:
        not_json = http.post(
            "/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"}
        )
        no_model = http.post("/v1/completions", json={"prompt": "hi"})
    assert not_json.status_code == 400 and not_json.json()["error"]["type"] == "invalid_request_error"
    assert no_model.status_code == 400 and no_model.json()["error"]["param"] == "model"
    assert "x-request-id" in no_model.headers


def test_text_that_cannot_be_encoded_is_400_at_the_gateway(gateway: RunningGateway) -> None:
    """A lone surrogate would fail in routing's prompt hashing or the metrics: refused where the body is read."""
    raw = '{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}], "user": "ok"}'
    limits = httpx.Limits(max_connections=1)
    with httpx.Client(base_url=gateway.base_url, timeout=60, limits=limits) as http:
        refused = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "messages.0.content"
        assert http.get("/health").status_code == 200


def test_an_unexpected_error_is_a_500_that_keeps_the_connection(gateway: RunningGateway) -> None:
    app = gateway.server.config.app

    async def broken() -> None:
        raise RuntimeError("a bug no handler maps")

    app.router.add_api_route("/test-only/broken", broken, methods=["GET"])
    with httpx.Client(base_url=gateway.base_url, timeout=60, limits=httpx.Limits(max_connections=1)) as http:
        first = http.get("/test-only/broken")
        assert first.status_code == 500 and first.json()["error"]["type"] == "server_error"
        stream = first.extensions["network_stream"]
        second = http.get("/health")
        assert second.status_code == 200 and second.extensions["network_stream"] is stream


def test_health_models_replicas_and_metrics(gateway: RunningGateway, client: openai.OpenAI) -> None:
    client.completions.create(model="tiny-qwen", prompt="hi", max_tokens=2)
    with gateway.http() as http:
        health = http.get("/health")
    assert health.status_code == 200
    assert health.json()["pools"]["tiny"]["routable"] == 2
    rows = gateway.replicas()
    assert {row["pool"] for row in rows.values()} == {"tiny", "tiny-qwen"}
    assert all(row["url"].startswith("http://127.0.0.1:") for row in rows.values())
    text = gateway.metrics()
    assert metric(text, "switchyard:fleet_requests_total", pool="tiny-qwen", status="200") >= 1
    assert metric(text, "switchyard:fleet_queue_depth", pool="tiny") == 0
    assert "switchyard:fleet_ejections_total" in text
    assert "switchyard:fleet_replica_restarts_total" in text
    # the replicas' own load, scraped from their /metrics by the health checker
    every_replica = [r for pool in gateway.runtime.pools.values() for r in pool.replicas]
    wait_for(lambda: all(replica.load.scraped_at is not None for replica in every_replica), what="a scrape")


def test_reported_cached_tokens_are_counted(client: openai.OpenAI, gateway: RunningGateway) -> None:
    """A repeated long prompt hits the replica's prefix cache; the replica's usage says so, and the gateway
    counts it whether the answer was streamed (with include_usage) or not."""
    prompt = "The quick brown fox jumps over the lazy dog. " * 4
    solo = start_gateway(gateway_config({"tiny": [gateway.runtime.pools["tiny"].replicas[0].url]}))
    try:
        solo.wait_all_healthy()
        solo_client = solo.client()
        for _ in range(2):
            solo_client.completions.create(model="tiny", prompt=prompt, max_tokens=2)
        list(
            solo_client.completions.create(
                model="tiny", prompt=prompt, max_tokens=2, stream=True, stream_options={"include_usage": True}
            )
        )
        reported = metric(solo.metrics(), "switchyard:fleet_reported_cached_tokens_total", pool="tiny")
    finally:
        solo.stop()
    assert reported >= 2 * 16  # two of the three found at least one 16-token block cached


def test_api_key_is_checked_at_the_gateway(replicas: Replicas) -> None:
    secured = start_gateway(gateway_config({"tiny": [replicas.a.url]}, api_key="fleet-secret"))
    try:
        with httpx.Client(base_url=secured.base_url, timeout=60) as http:
            refused = http.get("/v1/models")
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
            assert http.get("/health").status_code in (200, 503)  # open to load balancers
        wait_for(lambda: secured.runtime.pools["tiny"].routable() != [])
        client = secured.client(api_key="fleet-secret")
        assert client.completions.create(model="tiny", prompt="hi", max_tokens=2).choices
        with pytest.raises(openai.AuthenticationError):
            secured.client(api_key="wrong").completions.create(model="tiny", prompt="hi", max_tokens=2)
    finally:
        secured.stop()


def test_a_client_leaving_mid_stream_frees_the_slot_and_aborts_at_the_replica(
    gateway: RunningGateway, replicas: Replicas
) -> None:
    pool = gateway.runtime.pools["tiny"]

    def aborted_at_replicas() -> float:
        return sum(
            metric(
                httpx.get(f"{url}/metrics", timeout=30).text,
                "switchyard:request_success_total",
                finished_reason="abort",
            )
            for url in (replicas.a.url, replicas.b.url)
        )

    aborted_before = aborted_at_replicas()
    body = {"model": "tiny", "prompt": "abc", "max_tokens": 230, "stream": True, "ignore_eos": True}
    with gateway.http() as http, http.stream("POST", "/v1/completions", json=body) as response:
        next(line for line in response.iter_lines() if line.startswith("data:"))
    wait_for(lambda: sum(replica.in_flight for replica in pool.replicas) == 0, what="the slot returned")
    wait_for(lambda: aborted_at_replicas() == aborted_before + 1, what="the replica to abort the request")
    assert metric(gateway.metrics(), "switchyard:fleet_requests_total", pool="tiny", status="499") >= 1


class TokenRecorder(RoutingPolicy):
    """Keys on token ids, as prefix-cache-aware policies do: the gateway must count the prompt for it."""

    name = "token_recorder"
    needs_tokens = True

    def __init__(self) -> None:
        self.seen: list[tuple[int, ...] | None] = []

    def choose(self, request: RouteRequest, candidates: Sequence[Replica]) -> RouteDecision:
        self.seen.append(request.token_ids)
        return RouteDecision(candidates[0], "recorded", predicted_cached_tokens=3)


def test_a_policy_that_needs_tokens_gets_the_prompt_as_the_replica_counts_it(
    gateway: RunningGateway, replicas: Replicas
) -> None:
    pool = gateway.runtime.pools["tiny-qwen"]
    recorder = TokenRecorder()
    pool.policy = recorder
    try:
        client = gateway.client()
        client.chat.completions.create(model="tiny-qwen", messages=CHAT, max_tokens=2)
        client.completions.create(model="tiny-qwen", prompt=[5, 6, 7], max_tokens=2)
    finally:
        pool.policy = make_policy("round_robin")
    expected = httpx.post(
        f"{replicas.qwen.url}/tokenize", json={"model": "tiny-qwen", "messages": CHAT}, timeout=30
    ).json()["tokens"]
    assert recorder.seen == [tuple(expected), (5, 6, 7)]
    text = gateway.metrics()
    assert metric(text, "switchyard:fleet_requests_total", pool="tiny-qwen", decision="recorded") == 2
    assert metric(text, "switchyard:fleet_predicted_cached_tokens_total", pool="tiny-qwen") == 6
