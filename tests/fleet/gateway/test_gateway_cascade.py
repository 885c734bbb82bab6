"""A cascade through a real gateway and real replicas: `tiny` is the small tier, `tiny-qwen` the large one.

The replicas are random models, so their free text never ends on its own (it would always escalate as
truncated); a `guided_choice` makes each answer a short word that ends with `stop`, with the first token's
logprob about -0.69 on `tiny`. `lenient` keeps that answer, `strict` (no token below -0.01) escalates it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fleet_harness import (
    Replicas,
    RunningGateway,
    free_port,
    gateway_config,
    metric,
    start_gateway,
    wait_for,
)

from switchyard.fleet.cascade.config import CascadeConfig, ConfidenceThresholds
from switchyard.fleet.config import FleetConfig
from switchyard.fleet.ledger.events import Grant
from switchyard.fleet.ledger.ledger import Ledger
from switchyard.fleet.prices import MICROS_PER_CREDIT, ModelPrice, PriceTable
from switchyard.fleet.replica import ReplicaHealth
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.store import TenantStore
from switchyard.fleet.usage import TokenUsage

CASCADES = (
    CascadeConfig("lenient", ("tiny", "tiny-qwen"), ConfidenceThresholds(min_mean_logprob=-2.0)),
    CascadeConfig("strict", ("tiny", "tiny-qwen"), ConfidenceThresholds(min_token_logprob=-0.01)),
    CascadeConfig("fallback", ("down", "tiny-qwen"), ConfidenceThresholds()),
)
DOWN = f"http://127.0.0.1:{free_port()}"
"""The `down` pool's only worker: nothing listens there."""
PRICES = PriceTable(
    {
        "tiny": ModelPrice(input=Decimal(1000), output=Decimal(2000)),
        "tiny-qwen": ModelPrice(input=Decimal(3000), output=Decimal(6000)),
        "down": ModelPrice(input=Decimal(1000), output=Decimal(2000)),
    }
)
"""Credits per 1M tokens (cached prompt tokens at the input price), high enough to charge whole micro-credits."""
CHOICE = {"guided_choice": ["yes", "no"], "temperature": 0}


def _config(replicas: Replicas, **settings: Any) -> FleetConfig:
    pools = {"tiny": [replicas.a.url], "tiny-qwen": [replicas.qwen.url], "down": [DOWN]}
    return gateway_config(pools, cascades=CASCADES, prices=PRICES, **settings)


@pytest.fixture(scope="module")
def gateways(
    replicas: Replicas, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningGateway, RunningGateway, str, Path]]:
    """A plain gateway, and one with tenants and the credits ledger (its tenant's key and ledger file)."""
    folder = tmp_path_factory.mktemp("cascade")
    tenants_db, ledger_db = folder / "tenants.db", folder / "ledger.db"
    key = TenantStore(open_database(tenants_db)).add("acme", models=["lenient", "strict"]).key
    ledger = Ledger.open(ledger_db)
    ledger.record(Grant("grant-acme", "acme", 100 * MICROS_PER_CREDIT, time.time() - 1))
    ledger.close()
    plain = start_gateway(_config(replicas))
    billed = start_gateway(_config(replicas, tenants_db=str(tenants_db), credits_db=str(ledger_db)))
    for running in (plain, billed):
        pools = [pool for name, pool in running.runtime.pools.items() if name != "down"]
        replicas_now = [replica for pool in pools for replica in pool.replicas]
        wait_for(lambda r=replicas_now: all(x.health is ReplicaHealth.HEALTHY for x in r), 120, "healthy")
    yield plain, billed, key, ledger_db
    for running in (plain, billed):
        running.stop()


def _ask(running: RunningGateway, model: str, **options: Any) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Yes or no?"}],
        "max_tokens": 8,
        **CHOICE,
    }
    with running.http() as http:
        return http.post("/v1/chat/completions", json={**body, **options})


def _usage(payload: dict[str, Any]) -> tuple[int, int]:
    return payload["usage"]["prompt_tokens"], payload["usage"]["completion_tokens"]


def test_a_confident_small_answer_is_kept_and_an_unsure_one_escalated(
    gateways: tuple[RunningGateway, ...],
) -> None:
    plain = gateways[0]
    small = _ask(plain, "tiny", logprobs=True).json()
    large = _ask(plain, "tiny-qwen").json()

    accepted = _ask(plain, "lenient")
    assert accepted.status_code == 200
    assert accepted.headers["x-switchyard-cascade"] == "accepted"
    assert accepted.headers["x-switchyard-answered-by"] == "tiny"
    answer = accepted.json()
    assert answer["model"] == "tiny"
    assert answer["choices"][0]["message"]["content"] == small["choices"][0]["message"]["content"]
    assert answer["choices"][0]["logprobs"] is None  # asked of the tier by the gateway, not by the client
    assert _usage(answer) == _usage(small)

    escalated = _ask(plain, "strict")
    assert escalated.headers["x-switchyard-cascade"] == "escalated"
    assert escalated.headers["x-switchyard-answered-by"] == "tiny-qwen"
    answer = escalated.json()
    assert answer["model"] == "tiny-qwen"
    assert answer["choices"][0]["message"]["content"] == large["choices"][0]["message"]["content"]
    small_prompt, small_output = _usage(small)
    large_prompt, large_output = _usage(large)
    assert _usage(answer) == (small_prompt + large_prompt, small_output + large_output)  # both calls
    assert answer["usage"]["total_tokens"] == sum(_usage(answer))

    asked = _ask(plain, "lenient", logprobs=True).json()
    assert asked["choices"][0]["logprobs"]["content"]  # the client asked: it keeps them

    text = plain.metrics()
    assert metric(text, "switchyard:fleet_cascade_requests_total", cascade="lenient", outcome="accepted") >= 2
    assert metric(text, "switchyard:fleet_cascade_requests_total", cascade="strict", outcome="escalated") >= 1
    escalations = metric(
        text, "switchyard:fleet_cascade_decisions_total", cascade="strict", decision="escalated"
    )
    assert escalations >= 1
    assert (
        metric(text, "switchyard:fleet_cascade_decisions_total", cascade="strict", reason="low_token_logprob")
        == escalations
    )


def _stream(running: RunningGateway, model: str) -> tuple[str, str, Any, httpx.Headers]:
    client = running.client()
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "Yes or no?"}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=CHOICE,
    )
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    models = {c.model for c in chunks}
    assert len(models) == 1
    return text, models.pop(), chunks[-1].usage, raw.headers


def test_streams_replay_a_kept_answer_or_stream_the_large_tier_with_both_calls_counted(
    gateways: tuple[RunningGateway, ...],
) -> None:
    plain = gateways[0]
    small, large = _ask(plain, "tiny").json(), _ask(plain, "tiny-qwen").json()

    text, model, usage, headers = _stream(plain, "lenient")
    assert (headers["x-switchyard-cascade"], model) == ("accepted", "tiny")
    assert text == small["choices"][0]["message"]["content"]
    assert (usage.prompt_tokens, usage.completion_tokens) == _usage(small)

    text, model, usage, headers = _stream(plain, "strict")
    assert (headers["x-switchyard-cascade"], model) == ("escalated", "tiny-qwen")
    assert text == large["choices"][0]["message"]["content"]
    assert (usage.prompt_tokens, usage.completion_tokens) == tuple(
        a + b for a, b in zip(_usage(small), _usage(large), strict=True)
    )


def test_each_call_is_charged_at_its_own_models_price(gateways: tuple[Any, ...]) -> None:
    _, billed, key, ledger_db = gateways
    before = _balance(ledger_db)
    with billed.http(headers={"authorization": f"Bearer {key}"}) as http:
        started = time.time() - 1
        body = {"model": "strict", "messages": [{"role": "user", "content": "Yes or no?"}], "max_tokens": 8}
        answer = http.post("/v1/chat/completions", json={**body, **CHOICE})
        assert answer.status_code == 200 and answer.headers["x-switchyard-answered-by"] == "tiny-qwen"
        rows = http.get("/v1/usage", params={"start": started}).json()["data"]
    by_model = {row["model"]: row for row in rows}
    assert set(by_model) == {"tiny", "tiny-qwen"}  # the small call and the large one, each in its own row
    assert sum(row["prompt_tokens"] for row in rows) == answer.json()["usage"]["prompt_tokens"]
    charged = sum(
        PRICES.price(model).cost_micros(TokenUsage(row["prompt_tokens"], 0, row["output_tokens"]))
        for model, row in by_model.items()
    )
    assert before - _balance(ledger_db) == charged


def test_completions_are_judged_on_their_token_logprobs(gateways: tuple[RunningGateway, ...]) -> None:
    plain = gateways[0]
    body = {"prompt": "Yes or no?", "max_tokens": 8, **CHOICE}
    with plain.http() as http:
        small = http.post("/v1/completions", json={**body, "model": "tiny"}).json()
        accepted = http.post("/v1/completions", json={**body, "model": "lenient"})
        escalated = http.post("/v1/completions", json={**body, "model": "strict"})
    assert (accepted.headers["x-switchyard-cascade"], accepted.json()["model"]) == ("accepted", "tiny")
    assert accepted.json()["choices"][0]["text"] == small["choices"][0]["text"]
    assert accepted.json()["choices"][0]["logprobs"] is None
    assert (escalated.headers["x-switchyard-cascade"], escalated.json()["model"]) == (
        "escalated",
        "tiny-qwen",
    )
    assert escalated.json()["usage"]["prompt_tokens"] > small["usage"]["prompt_tokens"]  # both calls' prompts


def test_a_tier_without_a_healthy_replica_is_passed_over(gateways: tuple[RunningGateway, ...]) -> None:
    plain = gateways[0]
    answer = _ask(plain, "fallback")
    assert answer.status_code == 200
    assert answer.headers["x-switchyard-cascade"] == "escalated"
    assert answer.json()["model"] == "tiny-qwen"
    reasons = metric(
        plain.metrics(), "switchyard:fleet_cascade_decisions_total", cascade="fallback", reason="tier_error"
    )
    assert reasons >= 1


def test_the_responses_api_is_refused_and_models_lists_the_cascades(
    gateways: tuple[RunningGateway, ...],
) -> None:
    plain = gateways[0]
    with plain.http() as http:
        refused = http.post("/v1/responses", json={"model": "strict", "input": "hi"})
        listed = [card["id"] for card in http.get("/v1/models").json()["data"]]
    assert refused.status_code == 400
    assert "cascade" in json.loads(refused.content)["error"]["message"]
    assert listed == ["tiny", "tiny-qwen", "down", "lenient", "strict", "fallback"]
    with pytest.raises(openai.NotFoundError):
        plain.client().chat.completions.create(model="nowhere", messages=[{"role": "user", "content": "hi"}])


def _balance(ledger_db: Path) -> int:
    ledger = Ledger.open(ledger_db)
    try:
        return ledger.balance("acme", time.time())
    finally:
        ledger.close()
