"""Prices per model, in credits per 1M input, cached-input and output tokens, and what a request costs.

The credits ledger charges with them, and cost metrics weigh tokens with them. In a TOML file:

    [prices.switchyard-chat]
    input = 0.50            # credits per 1M prompt tokens
    cached_input = 0.05     # per 1M prompt tokens the replica found in its prefix cache (default: `input`)
    output = 1.50           # per 1M generated tokens

Prices are Decimals (a TOML float's shortest text), so a cost is exact until it is rounded up, once, to
the ledger's unit, the micro-credit.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from switchyard.fleet.errors import FleetConfigError, UnpricedModelError

MICROS_PER_CREDIT = 1_000_000
"""The ledger counts integer micro-credits, so balances add up exactly."""
TOKENS_PER_PRICE_UNIT = 1_000_000
"""Prices are per this many tokens."""


@dataclass(frozen=True)
class TokenUsage:
    """The tokens one request used (or, at admission, may use)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    """The part of `prompt_tokens` the replica found in its prefix cache (charged at `cached_input`)."""

    def __post_init__(self) -> None:
        counts = (self.prompt_tokens, self.completion_tokens, self.cached_prompt_tokens)
        if any(isinstance(count, bool) or not isinstance(count, int) or count < 0 for count in counts):
            raise ValueError(f"token counts must be non-negative integers, got {counts}")
        if self.cached_prompt_tokens > self.prompt_tokens:
            raise ValueError(
                f"cached_prompt_tokens ({self.cached_prompt_tokens}) exceeds prompt_tokens ({self.prompt_tokens})"
            )


@dataclass(frozen=True)
class ModelPrice:
    """One model's prices, in credits per 1M tokens."""

    input: Decimal
    output: Decimal
    cached_input: Decimal

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
                raise FleetConfigError(f"the `{name}` price must be a finite number >= 0, got {value!r}")

    def cost(self, usage: TokenUsage) -> Decimal:
        """Credits `usage` costs, exactly."""
        uncached = usage.prompt_tokens - usage.cached_prompt_tokens
        per_million = (
            uncached * self.input
            + usage.cached_prompt_tokens * self.cached_input
            + usage.completion_tokens * self.output
        )
        return per_million / TOKENS_PER_PRICE_UNIT

    def cost_micros(self, usage: TokenUsage) -> int:
        """Micro-credits `usage` costs, rounded up: never less than the exact cost, and monotone in the tokens,
        so a settlement never costs more than the reservation that bounds it."""
        return math.ceil(self.cost(usage) * MICROS_PER_CREDIT)


@dataclass(frozen=True)
class PriceTable:
    """The prices of the models a gateway serves, by the `model` clients send."""

    models: Mapping[str, ModelPrice]

    def price(self, model: str) -> ModelPrice:
        found = self.models.get(model)
        if found is None:
            raise UnpricedModelError(model)
        return found

    def require(self, models: Iterable[str]) -> None:
        """FleetConfigError naming every model in `models` without a price (checked once, at start)."""
        missing = sorted(set(models) - set(self.models))
        if missing:
            raise FleetConfigError(
                f"no price for {', '.join(f'`{name}`' for name in missing)}: add a [prices.MODEL] table "
                "with input, output (and cached_input) in credits per 1M tokens"
            )


def price_table_from_mapping(table: Mapping[str, Any]) -> PriceTable:
    """A PriceTable from the contents of a `prices` table: `{MODEL: {input, output, cached_input?}}`."""
    models = {}
    for model, entry in table.items():
        if not isinstance(entry, Mapping):
            raise FleetConfigError(f"prices.{model} must be a table")
        unknown = sorted(set(entry) - {"input", "output", "cached_input"})
        if unknown:
            raise FleetConfigError(f"[prices.{model}]: unknown key(s) {', '.join(unknown)}")
        if "input" not in entry or "output" not in entry:
            raise FleetConfigError(f"[prices.{model}] needs `input` and `output` (credits per 1M tokens)")
        try:
            input_price = _decimal(entry["input"])
            models[model] = ModelPrice(
                input=input_price,
                output=_decimal(entry["output"]),
                cached_input=_decimal(entry["cached_input"]) if "cached_input" in entry else input_price,
            )
        except FleetConfigError as exc:
            raise FleetConfigError(f"[prices.{model}]: {exc}") from exc
    return PriceTable(models=models)


def load_price_table(path: Path) -> PriceTable:
    """The [prices.MODEL] tables of a TOML file (an empty table when it has none)."""
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FleetConfigError(f"{path}: {exc}") from exc
    prices = document.get("prices", {})
    if not isinstance(prices, Mapping):
        raise FleetConfigError(f"{path}: `prices` must be a table of [prices.MODEL] tables")
    try:
        return price_table_from_mapping(prices)
    except FleetConfigError as exc:
        raise FleetConfigError(f"{path}: {exc}") from exc


def credits_text(micros: int) -> str:
    """Micro-credits as credits, without trailing zeros: 1500000 -> '1.5'."""
    text = f"{Decimal(micros) / MICROS_PER_CREDIT:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def micros_from_credits(credits: str) -> int:
    """A credit amount written in decimal ('12.5') as micro-credits; ValueError when it is not a number or
    is finer than a micro-credit."""
    try:
        value = Decimal(credits) * MICROS_PER_CREDIT
    except ArithmeticError as exc:
        raise ValueError(f"{credits!r} is not a number of credits") from exc
    if not value.is_finite() or value != value.to_integral_value():
        raise ValueError(f"{credits!r} is not a whole number of micro-credits (at most 6 decimals)")
    return int(value)


def _decimal(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise FleetConfigError(f"a price must be a number, got {value!r}")
    try:
        return Decimal(str(value))
    except ArithmeticError as exc:
        raise FleetConfigError(f"a price must be a number, got {value!r}") from exc
