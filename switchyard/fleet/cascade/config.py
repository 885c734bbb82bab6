"""A cascade's configuration: the pools it tries in order, and when a tier's answer is good enough to keep.

In the fleet's TOML file:

    [cascades.auto]                          # clients send model="auto"
    tiers = ["switchyard-chat-draft", "switchyard-chat"]   # pools, cheapest first; the last always answers
    min_mean_logprob = -0.35                 # the answer's mean token logprob must be at least this
    min_token_logprob = -4.0                 # and none of its tokens below this

A threshold left out is not checked; with neither, every tier but the first is never asked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.fleet.errors import FleetConfigError


@dataclass(frozen=True)
class ConfidenceThresholds:
    """What a tier's answer must clear to be kept; None skips that test."""

    min_mean_logprob: float | None = None
    """The mean logprob of the answer's tokens (its average confidence)."""
    min_token_logprob: float | None = None
    """The lowest logprob of any one token (its least confident step)."""

    def __post_init__(self) -> None:
        for name in ("min_mean_logprob", "min_token_logprob"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise FleetConfigError(f"{name} must be a finite number (a logprob, <= 0), got {value!r}")
            if value > 0:
                raise FleetConfigError(f"{name} is a logprob and must be <= 0, got {value!r}")


@dataclass(frozen=True)
class CascadeConfig:
    """A model name that is not a pool: its requests try `tiers` in order (see runner.py)."""

    name: str
    """The `model` clients send."""
    tiers: tuple[str, ...]
    """Pool names, cheapest first. Every tier but the last is asked with logprobs and kept when its answer
    clears `thresholds`; the last tier's answer is always kept."""
    thresholds: ConfidenceThresholds = ConfidenceThresholds()

    def __post_init__(self) -> None:
        if not self.name:
            raise FleetConfigError("a cascade needs a name")
        if len(self.tiers) < 2:
            raise FleetConfigError(f"cascade `{self.name}` needs at least two tiers (pools), cheapest first")
        if len(set(self.tiers)) != len(self.tiers):
            raise FleetConfigError(f"cascade `{self.name}` lists a tier twice")


_CASCADE_KEYS = {"tiers", "min_mean_logprob", "min_token_logprob"}


def cascades_from_mapping(table: Any) -> tuple[CascadeConfig, ...]:
    """The `[cascades.NAME]` tables of a fleet file."""
    if not isinstance(table, Mapping):
        raise FleetConfigError("`cascades` must be a table of [cascades.NAME] tables")
    cascades = []
    for name, entry in table.items():
        if not isinstance(entry, Mapping):
            raise FleetConfigError(f"cascades.{name} must be a table")
        unknown = sorted(set(entry) - _CASCADE_KEYS)
        if unknown:
            raise FleetConfigError(
                f"unknown setting(s) {', '.join(unknown)} in [cascades.{name}]; "
                f"known: {', '.join(sorted(_CASCADE_KEYS))}"
            )
        tiers = entry.get("tiers")
        if not isinstance(tiers, list) or not all(isinstance(tier, str) for tier in tiers):
            raise FleetConfigError(f"[cascades.{name}] tiers must be a list of pool names, cheapest first")
        thresholds = ConfidenceThresholds(
            min_mean_logprob=entry.get("min_mean_logprob"), min_token_logprob=entry.get("min_token_logprob")
        )
        cascades.append(CascadeConfig(name=name, tiers=tuple(tiers), thresholds=thresholds))
    return tuple(cascades)
