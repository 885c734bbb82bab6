"""The live snapshot: Prometheus text parsed, histogram quantiles over a window, the config's checks."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from switchyard.console.mount import ConsoleConfig
from switchyard.console.snapshot import LiveWindow, parse_metrics


def registry_with(latencies: list[float], kv: float) -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry()
    histogram = Histogram(
        "demo:ttft_seconds", "ttft", ["model_name"], buckets=(0.1, 0.2, 0.5, 1.0), registry=registry
    )
    Gauge("demo:kv_usage", "kv", ["model_name"], registry=registry).labels("m").set(kv)
    Counter("demo:tokens", "tokens", ["model_name"], registry=registry).labels("m").inc(42)
    for latency in latencies:
        histogram.labels("m").observe(latency)
    return registry, histogram


def test_series_keep_labels_and_counters_lose_their_suffixes() -> None:
    registry, _ = registry_with([0.05], kv=0.25)
    parsed = parse_metrics(generate_latest(registry).decode())
    assert parsed.series["demo:kv_usage"] == [{"labels": {"model_name": "m"}, "value": 0.25}]
    assert parsed.series["demo:tokens"] == [{"labels": {"model_name": "m"}, "value": 42.0}]
    assert not any(name.endswith("_created") for name in parsed.series)
    assert parsed.histograms["demo:ttft_seconds"].count == 1
    # a histogram's sum and count stay per label set too, for means by label (online eval's latency by pool)
    assert parsed.series["demo:ttft_seconds_count"] == [{"labels": {"model_name": "m"}, "value": 1.0}]
    assert parsed.series["demo:ttft_seconds_sum"] == [{"labels": {"model_name": "m"}, "value": 0.05}]


def test_quantiles_interpolate_inside_buckets_as_prometheus_does() -> None:
    registry, _ = registry_with([0.05] * 50 + [0.15] * 48 + [0.7] * 2, kv=0)
    snapshot = LiveWindow(10).snapshot(generate_latest(registry).decode(), now=0.0)
    quantiles = snapshot["quantiles"]["demo:ttft_seconds"]
    assert quantiles["count"] == 100
    assert quantiles["p50"] == pytest.approx(0.1)  # the 50th of 100 sits at the first bucket's top
    assert quantiles["p99"] == pytest.approx(0.75)  # halfway through the (0.5, 1.0] bucket's two


def test_quantiles_cover_only_the_window() -> None:
    registry, histogram = registry_with([0.9] * 10, kv=0)
    window = LiveWindow(seconds=5)
    window.snapshot(generate_latest(registry).decode(), now=0.0)
    for _ in range(10):
        histogram.labels("m").observe(0.05)
    later = window.snapshot(generate_latest(registry).decode(), now=3.0)["quantiles"]["demo:ttft_seconds"]
    assert later["count"] == 10 and later["p99"] <= 0.1  # the slow ones came before the window's start
    quiet = window.snapshot(generate_latest(registry).decode(), now=20.0)["quantiles"]["demo:ttft_seconds"]
    assert quiet["count"] == 0 and quiet["p50"] is None


def test_a_console_config_names_only_known_views() -> None:
    with pytest.raises(ValueError, match="unknown console views"):
        ConsoleConfig("x", ("playground", "charts"))
    with pytest.raises(ValueError, match="> 0"):
        ConsoleConfig("x", ("playground",), interval_s=0)
