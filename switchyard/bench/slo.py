"""Latency targets (`--slo ttft_p99=500ms,tpot_p99=50ms`): whether a run meets them, and which requests do."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from switchyard.bench.client import RequestResult

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = {"mean": None, "median": 50.0, "p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "max": 100.0}
_TERM = re.compile(r"^\s*(ttft|tpot|itl|e2e)_(\w+)\s*=\s*([0-9.]+(?:e-?\d+)?)\s*(ms|s)?\s*$")
_FAILED = 1e12
"""Seconds a failed request counts as, so it can only hurt a percentile (finite, so interpolation stays sound)."""


@dataclass(frozen=True)
class SloTerm:
    metric: str
    stat: str
    limit: float
    """Seconds."""

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.stat}"


@dataclass(frozen=True)
class Slo:
    terms: tuple[SloTerm, ...]

    def describe(self) -> str:
        return ", ".join(f"{t.name} ≤ {t.limit * 1e3:g} ms" for t in self.terms)


def parse_slo(text: str) -> Slo:
    """`ttft_p99=0.5,tpot_p99=50ms`: metric (ttft, tpot, itl, e2e) _ stat (mean, median, p90, p95, p99, max)
    = limit in seconds, or with an `ms`/`s` suffix."""
    terms = []
    for part in text.split(","):
        match = _TERM.match(part)
        if match is None or match.group(2) not in STATS:
            raise ValueError(
                f"cannot read SLO term {part.strip()!r}: expected METRIC_STAT=LIMIT with METRIC in "
                f"{', '.join(METRICS)}, STAT in {', '.join(STATS)}, LIMIT seconds or e.g. 500ms"
            )
        metric, stat, value, unit = match.groups()
        limit = float(value) / (1000 if unit == "ms" else 1)
        if limit <= 0:
            raise ValueError(f"SLO limit must be positive in {part.strip()!r}")
        terms.append(SloTerm(metric, stat, limit))
    return Slo(tuple(terms))


def statistic(values: list[float] | np.ndarray, stat: str) -> float:
    """mean or a linear-interpolated percentile (numpy's default); nan for no values."""
    if len(values) == 0:
        return float("nan")
    percentile = STATS[stat]
    return float(np.mean(values) if percentile is None else np.percentile(values, percentile))


def _request_value(result: RequestResult, term: SloTerm) -> float | None:
    if not result.ok:
        return _FAILED
    if term.metric == "itl":
        return statistic(result.itl, term.stat) if result.itl else None
    return getattr(result, term.metric)


def request_meets(result: RequestResult, slo: Slo) -> bool:
    """Every term holds for this request alone (its own ITL statistic for itl terms); failures never meet."""
    for term in slo.terms:
        value = _request_value(result, term)
        if value is not None and value > term.limit:
            return False
    return result.ok


def run_values(results: list[RequestResult], slo: Slo) -> dict[str, float]:
    """Each term's statistic over the run; a failed request counts as infinitely slow (for itl, as one gap);
    nan for a term with no samples at all (every output a single chunk), which no limit is met by."""
    values = {}
    for term in slo.terms:
        if term.metric == "itl":
            samples = [gap for r in results for gap in (r.itl if r.ok else [_FAILED])]
        else:
            samples = [v for r in results if (v := _request_value(r, term)) is not None]
        value = statistic(samples, term.stat)
        values[term.name] = float("inf") if value >= _FAILED / 10 else value
    return values


def run_meets(results: list[RequestResult], slo: Slo) -> bool:
    values = run_values(results, slo)
    return bool(results) and all(values[t.name] <= t.limit for t in slo.terms)
