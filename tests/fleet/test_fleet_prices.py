"""Prices per model from [prices.MODEL] tables, and what a request's tokens cost."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchyard.fleet.errors import FleetConfigError, UnpricedModelError
from switchyard.fleet.prices import (
    ModelPrice,
    credits_text,
    load_price_table,
    micros_from_credits,
    price_table_from_mapping,
)
from switchyard.fleet.usage import TokenUsage


def test_a_toml_file_gives_prices_per_model_and_cached_input_defaults_to_input(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(
        "port = 8080\n"
        "[prices.chat]\ninput = 0.5\ncached_input = 0.05\noutput = 1.5\n"
        '[prices."switchyard-draft"]\ninput = 0.1\noutput = 0.2\n'
    )
    table = load_price_table(path)
    assert table.price("chat") == ModelPrice(Decimal("0.5"), Decimal("1.5"), Decimal("0.05"))
    assert table.price("switchyard-draft").cached_input == Decimal("0.1")
    with pytest.raises(UnpricedModelError):
        table.price("code")


def test_a_cost_is_exact_and_rounds_up_once_to_micro_credits() -> None:
    price = ModelPrice(input=Decimal("0.5"), output=Decimal("1.5"), cached_input=Decimal("0.05"))
    usage = TokenUsage(prompt_tokens=1_000_000, output_tokens=2_000_000, cached_tokens=400_000)
    assert price.cost(usage) == Decimal("0.3") + Decimal("0.02") + Decimal("3")
    assert price.cost_micros(usage) == 3_320_000
    assert price.cost_micros(TokenUsage(prompt_tokens=1)) == 1  # half a micro-credit is charged as one
    assert price.cost_micros(TokenUsage()) == 0


@given(
    prompt=st.integers(0, 10_000),
    cached=st.integers(0, 10_000),
    completion=st.integers(0, 10_000),
    extra=st.integers(0, 10_000),
)
def test_using_fewer_tokens_never_costs_more(prompt: int, cached: int, completion: int, extra: int) -> None:
    price = ModelPrice(input=Decimal("0.37"), output=Decimal("1.13"), cached_input=Decimal("0.011"))
    cached = min(cached, prompt)
    used = TokenUsage(prompt_tokens=prompt, output_tokens=completion, cached_tokens=cached)
    reserved = TokenUsage(prompt_tokens=prompt, output_tokens=completion + extra)
    assert price.cost_micros(used) <= price.cost_micros(reserved)


@pytest.mark.parametrize(
    ("table", "complaint"),
    [
        ({"chat": {"input": 1}}, "needs `input` and `output`"),
        ({"chat": {"input": 1, "output": 1, "outptu": 2}}, "unknown setting"),
        ({"chat": {"input": -1, "output": 1}}, "must be a finite number >= 0"),
        ({"chat": {"input": True, "output": 1}}, "must be a number"),
        ({"chat": 3}, "must be a table"),
    ],
)
def test_bad_price_tables_are_refused_naming_the_model(table: dict, complaint: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(FleetConfigError, match=complaint):
        price_table_from_mapping(table)


def test_require_names_every_served_model_without_a_price() -> None:
    table = price_table_from_mapping({"chat": {"input": 1, "output": 2}})
    table.require(["chat"])
    with pytest.raises(FleetConfigError, match="`code`, `draft`"):
        table.require(["draft", "chat", "code"])


def test_token_usage_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError):
        TokenUsage(prompt_tokens=-1)
    with pytest.raises(ValueError):
        TokenUsage(prompt_tokens=3, cached_tokens=4)


def test_credit_amounts_convert_exactly() -> None:
    assert micros_from_credits("12.5") == 12_500_000
    assert micros_from_credits("0.000001") == 1
    assert credits_text(12_500_000) == "12.5" and credits_text(-3) == "-0.000003" and credits_text(0) == "0"
    for bad in ("1.0000001", "abc", "nan"):
        with pytest.raises(ValueError):
            micros_from_credits(bad)
