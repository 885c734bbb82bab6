"""Prometheus text turned into the console's live snapshot: current values, and latency quantiles over a window.

The page gets one small JSON object each second rather than the exposition text: parsing Prometheus text in the
browser would mean a second parser, and a histogram's quantiles over the last few seconds need the bucket counts
of a moment ago, which the stream keeps here, one window per connection.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

QUANTILES = (0.5, 0.99)
"""The tail and the middle: what the dashboard shows of every histogram."""


@dataclass(frozen=True)
class Histogram:
    """One histogram family's buckets summed over its label sets (upper bound -> cumulative count)."""

    buckets: tuple[tuple[float, float], ...]
    count: float

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made since `earlier` (bucket bounds are fixed for a family's life)."""
        before = dict(earlier.buckets)
        return Histogram(
            tuple((bound, count - before.get(bound, 0.0)) for bound, count in self.buckets),
            self.count - earlier.count,
        )

    def quantile(self, q: float) -> float | None:
        """The q-quantile, interpolated linearly inside its bucket as Prometheus' histogram_quantile does;
        None without observations."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for bound, count in self.buckets:
            if count >= rank:
                if math.isinf(bound):
                    return lower_bound  # beyond the last finite bucket: its bound is all we know
                share = (rank - lower_count) / (count - lower_count) if count > lower_count else 1.0
                return lower_bound + (bound - lower_bound) * share
            lower_bound, lower_count = bound, count
        return lower_bound


@dataclass(frozen=True)
class Parsed:
    """One scrape: every gauge/counter sample with its labels, and every histogram summed over labels (its
    `_sum` and `_count` also kept per label set, as series, for means by label)."""

    series: dict[str, list[dict[str, Any]]]
    histograms: dict[str, Histogram]


def parse_metrics(text: str) -> Parsed:
    series: dict[str, list[dict[str, Any]]] = {}
    histograms: dict[str, Histogram] = {}
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):  # when each series began: nothing a dashboard shows
            continue
        if family.type == "histogram":
            totals: dict[float, float] = {}
            count = 0.0
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    bound = float(sample.labels["le"])
                    totals[bound] = totals.get(bound, 0.0) + sample.value
                    continue
                if sample.name.endswith("_count"):
                    count += sample.value
                if sample.name.endswith(("_count", "_sum")):
                    series.setdefault(sample.name, []).append(
                        {"labels": sample.labels, "value": sample.value}
                    )
            histograms[family.name] = Histogram(tuple(sorted(totals.items())), count)
        elif family.type in ("gauge", "counter", "untyped"):
            rows = [
                {"labels": sample.labels, "value": sample.value}
                for sample in family.samples
                if not sample.name.endswith("_created")
            ]
            series[family.name] = rows
    return Parsed(series, histograms)


@dataclass
class LiveWindow:
    """The scrapes of the last `seconds`, to give each histogram's quantiles over that window (over the whole
    run on a connection's first scrape, so a page opened after the traffic still shows it)."""

    seconds: float = 10.0
    _history: deque[tuple[float, Parsed]] = field(default_factory=deque)

    def snapshot(self, text: str, now: float | None = None) -> dict[str, Any]:
        """The page's JSON for one scrape: `series` as scraped (the page takes rates of counters between
        snapshots) and `quantiles` of each histogram over the window (count: observations in it)."""
        now = time.time() if now is None else now
        parsed = parse_metrics(text)
        self._history.append((now, parsed))
        # The baseline is the newest scrape at least `seconds` old (the oldest kept while none is that old).
        while len(self._history) > 2 and now - self._history[1][0] >= self.seconds:
            self._history.popleft()
        baseline = self._history[0][1] if len(self._history) > 1 else None
        quantiles: dict[str, dict[str, float | None]] = {}
        for name, histogram in parsed.histograms.items():
            earlier = baseline.histograms.get(name) if baseline is not None else None
            recent = (
                histogram.minus(earlier) if earlier is not None else histogram
            )  # first scrape: since start
            quantiles[name] = {
                **{f"p{round(q * 100)}": recent.quantile(q) for q in QUANTILES},
                "count": recent.count,
            }
        return {"time": now, "window_s": self.seconds, "series": parsed.series, "quantiles": quantiles}
