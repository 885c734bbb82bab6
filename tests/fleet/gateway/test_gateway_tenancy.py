"""Tenants at the gateway, through the official client and real replicas: keys (401, 403, rotation), limits
(429 with the bucket's Retry-After, under a fake clock), the tenant and priority reaching the replica, the
response cache kept per tenant, usage and costs, and the admission hooks' settlement."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fleet_harness import Replicas, RunningGateway, gateway_config, metric, start_gateway, wait_for
from recording_worker import OUTPUT_TOKENS, PROMPT_TOKENS, RecordingWorker

from switchyard.fleet.admission_hooks import HookRequest
from switchyard.fleet.errors import InsufficientQuotaError
from switchyard.fleet.prices import ModelPrice, PriceTable
from switchyard.fleet.replica import ReplicaHealth
from switchyard.fleet.response_cache import ResponseCacheConfig
from switchyard.fleet.tenancy.cli import main as tenants_main
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.records import KeyLimits
from switchyard.fleet.tenancy.store import TenantStore
from switchyard.fleet.usage import TokenUsage

OPERATOR_KEY = "operator-key"
PRICES = PriceTable({"tiny": ModelPrice(input=1.0, cached_input=0.5, output=2.0)})
CACHE_TTL = 60.0


class FakeClock:
    """Times the keys' buckets and the cache's expiry; everything else in the gateway runs on real time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class RecordingHooks:
    """Admission hooks that record their calls, and refuse the tenants in `broke` (as a ledger out of credit)."""

    broke: set[str] = field(default_factory=set)
    admitted: list[HookRequest] = field(default_factory=list)
    settled: list[tuple[HookRequest, TokenUsage]] = field(default_factory=list)

    async def before(self, request: HookRequest) -> HookRequest:
        if request.tenant in self.broke:
            raise InsufficientQuotaError("acme", "0.5", "0.1")
        self.admitted.append(request)
        return request

    async def after(self, token: HookRequest, usage: TokenUsage) -> None:
        self.settled.append((token, usage))

    def settled_for(self, tenant: str) -> list[TokenUsage]:
        return [usage for request, usage in self.settled if request.tenant == tenant]


@dataclass
class Tenancy:
    gateway: RunningGateway
    db: Path
    store: TenantStore
    clock: FakeClock
    hooks: RecordingHooks
    worker: RecordingWorker

    def add(self, name: str, **options: Any) -> str:
        return self.store.add(name, **options).key

    def client(self, key: str) -> openai.OpenAI:
        return self.gateway.client(api_key=key)


@pytest.fixture(scope="module")
def tenancy(replicas: Replicas, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    """A gateway with tenancy, the cache and prices: `tiny` on replicas a and b, `tiny-qwen` on qwen, and
    `recorded` on a worker that records what it receives."""
    db = tmp_path_factory.mktemp("tenancy") / "tenants.db"
    store = TenantStore(open_database(db))
    worker = RecordingWorker()
    clock, hooks = FakeClock(), RecordingHooks()
    config = gateway_config(
        {
            "tiny": [replicas.a.url, replicas.b.url],
            "tiny-qwen": [replicas.qwen.url],
            "recorded": [worker.url],
        },
        api_key=OPERATOR_KEY,
        tenants_db=str(db),
        response_cache=ResponseCacheConfig(ttl=CACHE_TTL),
        prices=PRICES,
    )
    gateway = start_gateway(config, hooks=hooks, limits_clock=clock)
    replicas_now = [replica for pool in gateway.runtime.pools.values() for replica in pool.replicas]
    wait_for(
        lambda: all(r.health is ReplicaHealth.HEALTHY for r in replicas_now), 120, "every replica healthy"
    )
    yield Tenancy(gateway, db, store, clock, hooks, worker)
    gateway.stop()
    worker.stop()


def chat(client: openai.OpenAI, content: str, model: str = "tiny", **options: Any) -> Any:
    options.setdefault("max_tokens", 4)
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}], **options
    )


def test_a_wrong_or_missing_key_is_401_and_a_model_outside_the_key_403(tenancy: Tenancy) -> None:
    narrowed = tenancy.add("narrowed", models=["tiny"])
    with pytest.raises(openai.AuthenticationError) as raised:
        chat(tenancy.client("sy-not-a-key"), "hi")
    assert raised.value.code == "invalid_api_key"
    response = httpx.post(f"{tenancy.gateway.base_url}/v1/chat/completions", json={"model": "tiny"})
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.PermissionDeniedError) as denied:
        chat(tenancy.client(narrowed), "hi", model="tiny-qwen")
    assert denied.value.body["param"] == "model"  # type: ignore[index]
    assert chat(tenancy.client(narrowed), "hi").parse().model == "tiny"
    assert [model.id for model in tenancy.client(narrowed).models.list()] == ["tiny"]
    with pytest.raises(openai.PermissionDeniedError):  # the operators' key reads; it does not send requests
        chat(tenancy.client(OPERATOR_KEY), "hi")


def test_rotating_a_key_invalidates_the_old_one_at_the_next_request(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tenancy.add("rotating")
    chat(tenancy.client(old), "hi")
    assert tenants_main(["rotate-key", "--db", str(tenancy.db), "rotating"]) == 0
    new = capsys.readouterr().out.strip().splitlines()[-1]
    with pytest.raises(openai.AuthenticationError):
        chat(tenancy.client(old), "hi")
    assert chat(tenancy.client(new), "hi").http_response.status_code == 200


def test_a_key_over_its_requests_per_minute_gets_429_with_its_buckets_retry_after(tenancy: Tenancy) -> None:
    client = tenancy.client(tenancy.add("limited", limits=KeyLimits(requests_per_minute=2)))
    chat(client, "one")
    chat(client, "two")
    with pytest.raises(openai.RateLimitError) as raised:
        chat(client, "three")
    assert raised.value.code == "rate_limit_exceeded"
    assert raised.value.response.headers["retry-after"] == "30"  # one request refills in 60 / 2 s
    tenancy.clock.advance(29.0)
    with pytest.raises(openai.RateLimitError) as again:
        chat(client, "three")
    assert again.value.response.headers["retry-after"] == "1"
    tenancy.clock.advance(1.0)
    assert chat(client, "three").http_response.status_code == 200
    metrics = tenancy.gateway.metrics()
    assert (
        metric(metrics, "switchyard:fleet_tenant_requests_total", tenant="limited", outcome="rate_limited")
        == 2
    )


def test_a_key_over_its_tokens_per_minute_waits_for_the_tokens_it_used(tenancy: Tenancy) -> None:
    client = tenancy.client(tenancy.add("wordy", limits=KeyLimits(tokens_per_minute=60)))
    answer = chat(client, "hello there", extra_body={"ignore_eos": True}).parse()
    used = (
        answer.usage.prompt_tokens + answer.usage.completion_tokens
    )  # the replica's count, not the estimate
    assert 20 < used < 60
    # The next prompt, 40 tokens by its length (160 characters / 4), does not fit the 60 - used left.
    with pytest.raises(openai.RateLimitError) as raised:
        chat(client, "x" * 160)
    assert raised.value.body["type"] == "tokens"  # type: ignore[index]
    missing = 40 - (60 - used)
    assert raised.value.response.headers["retry-after"] == str(missing)  # the bucket refills 1 token a second
    tenancy.clock.advance(missing)
    assert chat(client, "x" * 160).http_response.status_code == 200


def test_the_tenant_and_its_priority_reach_the_replica(tenancy: Tenancy, replicas: Replicas) -> None:
    key = tenancy.add("prio", priority=-2, weight=3.0)
    client = tenancy.client(key)
    chat(client, "hi", model="recorded", user="mallory", extra_body={"priority": -100})
    body = tenancy.worker.bodies[-1]
    assert (body["user"], body["priority"]) == ("prio", -2)  # the client's own claims were replaced
    assert "authorization" not in tenancy.worker.headers[-1]  # the tenant's key stays at the gateway
    chat(client, "Tell me a story", max_tokens=4)

    def replica_tokens() -> float:
        return sum(
            metric(httpx.get(f"{r.url}/metrics").text, "switchyard:tenant_tokens_total", tenant="prio")
            for r in (replicas.a, replicas.b)
        )

    wait_for(lambda: replica_tokens() > 0, 30, "the replica's scheduler to count the tenant's tokens")


def test_two_tenants_never_see_each_others_cached_answers(tenancy: Tenancy) -> None:
    alice, bob = tenancy.client(tenancy.add("cache-alice")), tenancy.client(tenancy.add("cache-bob"))
    first = chat(alice, "Once upon a time", temperature=0)
    assert first.headers["x-switchyard-cache"] == "miss"
    again = chat(alice, "Once upon a time", temperature=0.0)
    assert again.headers["x-switchyard-cache"] == "hit"
    assert again.parse().id == first.parse().id  # the very answer, not a new one
    assert chat(bob, "Once upon a time", temperature=0).headers["x-switchyard-cache"] == "miss"
    assert chat(bob, "Once upon a time", temperature=0).headers["x-switchyard-cache"] == "hit"
    fresh = chat(alice, "Once upon a time", temperature=0, extra_headers={"Cache-Control": "no-cache"})
    assert fresh.headers["x-switchyard-cache"] == "bypass" and fresh.parse().id != first.parse().id
    sampled = chat(alice, "Once upon a time", temperature=1.0)
    assert sampled.headers["x-switchyard-cache"] == "uncacheable"
    assert chat(alice, "Once upon a time", temperature=1.0).headers["x-switchyard-cache"] == "uncacheable"
    assert chat(alice, "Once upon a time", temperature=0.5, seed=3).headers["x-switchyard-cache"] == "miss"
    tenancy.clock.advance(CACHE_TTL)
    assert chat(alice, "Once upon a time", temperature=0).headers["x-switchyard-cache"] == "miss"
    hits = metric(tenancy.gateway.metrics(), "switchyard:fleet_response_cache_lookups_total", result="hit")
    assert hits >= 2
    assert len(tenancy.hooks.settled_for("cache-alice")) == 6  # of 7: the hit reached no replica and no hook


def test_a_cached_stream_replays_its_events(tenancy: Tenancy) -> None:
    client = tenancy.client(tenancy.add("streamer"))

    def stream() -> tuple[str, str]:
        raw = client.chat.completions.with_raw_response.create(
            model="tiny",
            messages=[{"role": "user", "content": "A stream to keep"}],
            max_tokens=5,
            temperature=0,
            stream=True,
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
        return raw.headers["x-switchyard-cache"], text

    first_state, first_text = stream()
    wait_for(lambda: len(tenancy.hooks.settled_for("streamer")) == 1, 30, "the stream to settle")
    second_state, second_text = stream()
    assert (first_state, second_state) == ("miss", "hit")
    assert second_text == first_text and first_text


def test_usage_sums_tokens_requests_and_cost_per_tenant(tenancy: Tenancy) -> None:
    key = tenancy.add("counted")
    client = tenancy.client(key)
    answers = [chat(client, f"Question {i}", extra_body={"ignore_eos": True}).parse() for i in range(3)]
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Question 0"}],
        max_tokens=4,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert all(chunk.usage is None for chunk in chunks)  # the client did not ask for the usage chunk
    wait_for(lambda: len(tenancy.hooks.settled_for("counted")) == 4, 30, "every request to settle")
    prompt = sum(a.usage.prompt_tokens for a in answers) + answers[0].usage.prompt_tokens
    output = sum(a.usage.completion_tokens for a in answers) + 4
    cached = sum(usage.cached_tokens for usage in tenancy.hooks.settled_for("counted"))
    assert sum(usage.output_tokens for usage in tenancy.hooks.settled_for("counted")) == output

    operator = tenancy.gateway.http(headers={"authorization": f"Bearer {OPERATOR_KEY}"})
    report = operator.get("/v1/usage", params={"tenant": "counted", "start": "1970-01-01T00:00:00"}).json()
    (row,) = report["data"]
    assert (row["requests"], row["prompt_tokens"], row["output_tokens"]) == (4, prompt, output)
    assert row["cached_tokens"] == cached
    expected_cost = ((prompt - cached) * 1.0 + cached * 0.5 + output * 2.0) / 1e6
    assert row["cost"] == pytest.approx(expected_cost)
    assert report["total"]["requests"] == 4
    everyone = operator.get("/v1/usage").json()
    assert {"counted", "limited"} <= {row["tenant"] for row in everyone["data"]}
    assert operator.get("/v1/usage", params={"tenant": "counted", "start": "4102444800"}).json()["data"] == []
    assert operator.get("/v1/usage", params={"start": "yesterday"}).status_code == 400

    own = tenancy.gateway.http(headers={"authorization": f"Bearer {key}"})
    assert own.get("/v1/usage").json()["tenant"] == "counted"
    denied = own.get("/v1/usage", params={"tenant": "limited"})
    assert denied.status_code == 403 and denied.json()["error"]["type"] == "permission_error"
    metrics = tenancy.gateway.metrics()
    assert metric(metrics, "switchyard:fleet_tenant_tokens_total", tenant="counted", kind="output") == output
    assert metric(metrics, "switchyard:fleet_tenant_cost_total", tenant="counted") == pytest.approx(
        expected_cost
    )
    assert metric(metrics, "switchyard:fleet_price_per_million_tokens", model="tiny", kind="output") == 2.0


def test_a_hook_refusal_is_openais_insufficient_quota(tenancy: Tenancy) -> None:
    tenancy.hooks.broke.add("broke")
    client = tenancy.client(tenancy.add("broke"))
    with pytest.raises(openai.RateLimitError) as raised:
        chat(client, "hi")
    assert raised.value.code == "insufficient_quota"
    assert raised.value.body["type"] == "insufficient_quota"  # type: ignore[index]
    assert tenancy.hooks.settled_for("broke") == []


def test_a_stream_cut_by_its_replica_is_settled_to_what_was_sent(tenancy: Tenancy) -> None:
    client = tenancy.client(tenancy.add("cut"))
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model="recorded", messages=[{"role": "user", "content": "abcdefgh"}], max_tokens=50, stream=True
        ):
            pass
    wait_for(lambda: len(tenancy.hooks.settled_for("cut")) == 1, 30, "the cut stream to settle")
    (usage,) = tenancy.hooks.settled_for("cut")
    assert usage == TokenUsage(prompt_tokens=2, output_tokens=tenancy.worker.cut_after)  # the estimate: 8 / 4
    (admitted,) = [request for request in tenancy.hooks.admitted if request.tenant == "cut"]
    assert (admitted.model, admitted.max_tokens, admitted.prompt_tokens) == ("recorded", 50, 2)


def test_a_stream_its_client_abandons_is_settled_to_what_was_generated(tenancy: Tenancy) -> None:
    key = tenancy.add("leaver")
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "go on"}],
        "max_tokens": 200,
        "stream": True,
        "ignore_eos": True,
    }
    http = tenancy.gateway.http(headers={"authorization": f"Bearer {key}"})
    with http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        received = [line for line, _ in zip(lines, range(6), strict=False) if line.startswith("data:")]
    assert received
    wait_for(lambda: len(tenancy.hooks.settled_for("leaver")) == 1, 60, "the abandoned stream to settle")
    (usage,) = tenancy.hooks.settled_for("leaver")
    assert 1 <= usage.output_tokens < 200


def test_a_non_streamed_answer_is_settled_to_the_replicas_usage(tenancy: Tenancy) -> None:
    client = tenancy.client(tenancy.add("exact"))
    chat(client, "hi", model="recorded")
    wait_for(lambda: len(tenancy.hooks.settled_for("exact")) == 1, 30, "the request to settle")
    assert tenancy.hooks.settled_for("exact") == [TokenUsage(PROMPT_TOKENS, 0, OUTPUT_TOKENS)]


def test_without_tenancy_the_cache_keeps_clients_keys_apart_and_hooks_see_the_default_tenant(
    replicas: Replicas,
) -> None:
    hooks = RecordingHooks()
    config = gateway_config({"tiny": [replicas.a.url]}, response_cache=ResponseCacheConfig(ttl=CACHE_TTL))
    gateway = start_gateway(config, hooks=hooks)
    try:
        gateway.wait_all_healthy()
        first, second = gateway.client(api_key="client-one"), gateway.client(api_key="client-two")
        assert chat(first, "Keys apart", temperature=0).headers["x-switchyard-cache"] == "miss"
        assert chat(first, "Keys apart", temperature=0).headers["x-switchyard-cache"] == "hit"
        assert chat(second, "Keys apart", temperature=0).headers["x-switchyard-cache"] == "miss"
        wait_for(lambda: len(hooks.settled) == 2, 30, "both replica answers to settle")
        assert {request.tenant for request, _ in hooks.settled} == {"default"}
        assert all(usage.output_tokens > 0 for _, usage in hooks.settled)
    finally:
        gateway.stop()


def test_the_consoles_fleet_view_is_the_operators(tenancy: Tenancy) -> None:
    """A tenant's key chats in the console's playground, but the live fleet view names every tenant."""
    tenant = tenancy.add("console-viewer")
    with tenancy.gateway.http() as http:
        refused = http.get("/v1/console/stream", headers={"Authorization": f"Bearer {tenant}"})
        assert refused.status_code == 403 and "operators' key" in refused.json()["error"]["message"]
        assert http.get("/v1/console/ping", headers={"Authorization": f"Bearer {tenant}"}).status_code == 200
        operator = {"Authorization": f"Bearer {OPERATOR_KEY}"}
        with http.stream("GET", "/v1/console/stream", headers=operator) as stream:
            line = next(line for line in stream.iter_lines() if line.startswith("data:"))
    assert "switchyard:fleet_tenant_requests" in line and '"replicas"' in line
