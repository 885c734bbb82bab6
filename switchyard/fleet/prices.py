"""Prices per model, in credits per 1M input, cached-input and output tokens, and what a request costs.

The credits ledger charges with them, and usage reports and cost metrics weigh tokens with them. In a TOML
file:

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
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from switchyard.fleet.errors import FleetConfigError, UnpricedModelError
from switchyard.fleet.usage import TokenUsage

MICROS_PER_CREDIT = 1_000_000
"""The ledger counts integer micro-credits, so balances add up exactly."""
TOKENS_PER_PRICE_UNIT = 1_000_000
"""Prices are per this many tokens."""


@dataclass(frozen=True)
class ModelPrice:
    """One model's prices, in credits per 1M tokens."""

    input: Decimal | float = Decimal(0)
    output: Decimal | float = Decimal(0)
    cached_input: Decimal | float | None = None
    """None: the input price."""

    def __post_init__(self) -> None:
        if self.cached_input is None:
            object.__setattr__(self, "cached_input", self.input)
        for name in ("input", "output", "cached_input"):
            value = _decimal(getattr(self, name))
            if not value.is_finite() or value < 0:
                raise FleetConfigError(f"the `{name}` price must be a finite number >= 0, got {value!r}")
            object.__setattr__(self, name, value)

    def cost(self, usage: TokenUsage) -> Decimal:
        """Credits `usage` costs, exactly."""
        uncached = max(usage.prompt_tokens - usage.cached_tokens, 0)
        per_million = (
            uncached * Decimal(self.input)
            + usage.cached_tokens * Decimal(self.cached_input or 0)
            + usage.output_tokens * Decimal(self.output)
        )
        return per_million / TOKENS_PER_PRICE_UNIT

    def cost_micros(self, usage: TokenUsage) -> int:
        """Micro-credits `usage` costs, rounded up: never less than the exact cost, and monotone in the tokens,
        so a settlement never costs more than the reservation that bounds it."""
        return math.ceil(self.cost(usage) * MICROS_PER_CREDIT)


@dataclass(frozen=True)
class PriceTable:
    """The prices of the models a gateway serves, by the `model` clients send."""

    models: Mapping[str, ModelPrice] = field(default_factory=dict)

    def price(self, model: str) -> ModelPrice:
        """The model's prices; UnpricedModelError when it has none (the ledger cannot charge for it)."""
        found = self.models.get(model)
        if found is None:
            raise UnpricedModelError(model)
        return found

    def cost(self, model: str, usage: TokenUsage) -> float:
        """What `usage` of `model` costs, for usage reports and metrics; 0 for a model without a price."""
        found = self.models.get(model)
        return 0.0 if found is None else float(found.cost(usage))

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
            raise FleetConfigError(
                f"unknown setting(s) {', '.join(unknown)} in [prices.{model}]; known: cached_input, input, output"
            )
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
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise FleetConfigError(f"a price must be a number, got {value!r}")
    try:
        return Decimal(str(value))
    except ArithmeticError as exc:
        raise FleetConfigError(f"a price must be a number, got {value!r}") from exc
