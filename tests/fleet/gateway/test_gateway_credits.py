"""The credits ledger at the gateway, through the official client and real replicas: a request is charged
what it used at the model's price, a tenant out of credit gets 429 insufficient_quota (and the client does
not retry it), and a gateway started again on the same files keeps every balance."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import openai
import pytest
from fleet_harness import Replicas, gateway_config, start_gateway, wait_for

from switchyard.fleet.ledger.events import Grant
from switchyard.fleet.ledger.ledger import Ledger
from switchyard.fleet.prices import MICROS_PER_CREDIT, ModelPrice, PriceTable
from switchyard.fleet.replica import ReplicaHealth
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.store import TenantStore
from switchyard.fleet.usage import TokenUsage

PRICE = ModelPrice(input=Decimal(1000), output=Decimal(3000), cached_input=Decimal(100))
"""Credits per 1M tokens, high enough that one tiny request costs whole micro-credits."""


def balance(ledger_db: Path, tenant: str) -> int:
    ledger = Ledger.open(ledger_db)
    try:
        return ledger.balance(tenant, time.time())
    finally:
        ledger.close()


def grant(ledger_db: Path, tenant: str, credits: int) -> None:
    ledger = Ledger.open(ledger_db)
    try:
        ledger.record(Grant(f"grant-{tenant}", tenant, credits * MICROS_PER_CREDIT, time.time() - 1))
    finally:
        ledger.close()


def test_requests_are_charged_refused_when_out_of_credit_and_balances_survive_a_restart(
    replicas: Replicas, tmp_path: Path
) -> None:
    tenants_db, ledger_db = tmp_path / "tenants.db", tmp_path / "ledger.db"
    store = TenantStore(open_database(tenants_db))
    rich, poor = store.add("rich").key, store.add("poor").key
    grant(ledger_db, "rich", 10)
    config = gateway_config(
        {"tiny": [replicas.a.url]},
        tenants_db=str(tenants_db),
        credits_db=str(ledger_db),
        prices=PriceTable({"tiny": PRICE}),
    )
    for attempt in range(2):  # the second gateway opens the same ledger: nothing lost, nothing twice
        gateway = start_gateway(config)
        try:
            replica = gateway.runtime.pools["tiny"].replicas[0]
            wait_for(lambda r=replica: r.health is ReplicaHealth.HEALTHY, 120, "the replica healthy")
            before = balance(ledger_db, "rich")
            answer = gateway.client(api_key=rich).completions.create(
                model="tiny", prompt="Hello there", max_tokens=4
            )
            assert answer.usage is not None
            cached = (
                answer.usage.prompt_tokens_details.cached_tokens if answer.usage.prompt_tokens_details else 0
            )
            usage = TokenUsage(answer.usage.prompt_tokens, cached or 0, answer.usage.completion_tokens)
            assert before - balance(ledger_db, "rich") == PRICE.cost_micros(usage), f"attempt {attempt}"
            with pytest.raises(openai.RateLimitError) as refused:
                gateway.client(api_key=poor).with_options(max_retries=2).completions.create(
                    model="tiny", prompt="Hello", max_tokens=4
                )
            assert refused.value.code == "insufficient_quota"
            assert balance(ledger_db, "poor") == 0
        finally:
            gateway.stop()
