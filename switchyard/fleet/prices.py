"""What tokens cost, per model: the price table that usage reports and the credits ledger both charge by.

Prices are per 1M tokens, in whatever currency unit the operator bills in, as OpenAI quotes them: input
tokens, input tokens the replica found in its prefix cache (cheaper, since they cost no prefill), and output
tokens. They come from the fleet's TOML file:

    [prices.chat]
    input = 0.50
    cached_input = 0.125
    output = 1.50

A model without a price costs nothing (its usage is still counted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.usage import TokenUsage

TOKENS_PER_PRICE_UNIT = 1_000_000


@dataclass(frozen=True)
class ModelPrice:
    """One model's prices per 1M tokens."""

    input: float = 0.0
    """Per 1M prompt tokens the replica had to compute."""
    cached_input: float | None = None
    """Per 1M prompt tokens served from the replica's prefix cache; None: the input price."""
    output: float = 0.0
    """Per 1M generated tokens."""

    def __post_init__(self) -> None:
        prices = (self.input, self.output, self.cached_input if self.cached_input is not None else 0.0)
        if any(price < 0 for price in prices):
            raise FleetConfigError("prices must be >= 0")

    def cost(self, usage: TokenUsage) -> float:
        """What `usage` costs at these prices."""
        cached_price = self.input if self.cached_input is None else self.cached_input
        uncached = max(usage.prompt_tokens - usage.cached_tokens, 0)
        return (
            uncached * self.input + usage.cached_tokens * cached_price + usage.output_tokens * self.output
        ) / TOKENS_PER_PRICE_UNIT


@dataclass(frozen=True)
class PriceTable:
    """Prices by model name (a pool's name, the `model` clients send)."""

    prices: Mapping[str, ModelPrice] = field(default_factory=dict)

    def price(self, model: str) -> ModelPrice:
        """The model's prices; all zero for a model the table does not list."""
        return self.prices.get(model, _FREE)

    def cost(self, model: str, usage: TokenUsage) -> float:
        return self.price(model).cost(usage)


_FREE = ModelPrice()
_PRICE_KEYS = {"input", "cached_input", "output"}


def price_table_from_mapping(table: Mapping[str, Any]) -> PriceTable:
    """A PriceTable from the TOML `[prices.MODEL]` tables; FleetConfigError naming a bad entry."""
    prices: dict[str, ModelPrice] = {}
    for model, entry in table.items():
        if not isinstance(entry, Mapping):
            raise FleetConfigError(f"prices.{model} must be a table of input, cached_input and output")
        unknown = sorted(set(entry) - _PRICE_KEYS)
        if unknown:
            raise FleetConfigError(
                f"unknown setting(s) {', '.join(unknown)} in [prices.{model}]; known: "
                f"{', '.join(sorted(_PRICE_KEYS))}"
            )
        values = {}
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FleetConfigError(f"prices.{model}.{key} must be a number (per 1M tokens)")
            values[key] = float(value)
        prices[model] = ModelPrice(**values)
    return PriceTable(prices)
