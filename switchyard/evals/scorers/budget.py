"""Latency and cost per case, as pass/fail checks against a budget (their values feed the summary anyway)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from switchyard.evals.outcome import Outcome
from switchyard.evals.scorers.base import ScoringContext, Verdict, scorer


@scorer(
    "latency",
    "the case took at most `max_seconds` (wall clock, whole agent run included)",
    required=("max_seconds",),
)
def latency(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    limit = float(params["max_seconds"])
    ok = outcome.latency_s <= limit
    return Verdict(ok, value=outcome.latency_s, detail="" if ok else f"{outcome.latency_s:.3f} s > {limit} s")


@scorer(
    "cost",
    "the case cost at most `max_usd` at the run's prices (--price-input/--price-output)",
    required=("max_usd",),
)
def cost(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    limit = float(params["max_usd"])
    ok = outcome.cost <= limit
    return Verdict(ok, value=outcome.cost, detail="" if ok else f"${outcome.cost:.6f} > ${limit}")


SCORERS = (latency, cost)
