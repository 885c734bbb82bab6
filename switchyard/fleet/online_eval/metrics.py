"""Online evaluation on the gateway's /metrics, per pool (the model version clients name) and shadow flag.

Logged requests, their latency and cost, and feedback are counted as they happen; judges' verdicts are written
into the log by another process (`switchyard eval online`), so they are read from the log when /metrics is
scraped (one grouped query over the verdicts).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from switchyard.fleet.online_eval.log import OnlineEvalLog
from switchyard.fleet.online_eval.record import LoggedExchange

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class OnlineEvalMetrics:
    def __init__(self, registry: CollectorRegistry, log: OnlineEvalLog) -> None:
        self._logged = Counter(
            "switchyard:fleet_online_eval_logged",
            "Requests logged for online evaluation, by pool and shadow (true: a shadow pool's copy).",
            ["pool", "shadow"],
            registry=registry,
        )
        self._latency = Histogram(
            "switchyard:fleet_online_eval_latency_seconds",
            "Seconds from admission to the end of the answer of logged requests.",
            ["pool", "shadow"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self._cost = Counter(
            "switchyard:fleet_online_eval_cost",
            "What logged requests cost at the price table's prices.",
            ["pool", "shadow"],
            registry=registry,
        )
        self._feedback = Counter(
            "switchyard:fleet_online_eval_feedback",
            "Feedback given with POST /v1/feedback, by the pool that answered.",
            ["pool"],
            registry=registry,
        )
        self._ratings = Counter(
            "switchyard:fleet_online_eval_ratings",
            "Ratings (in [-1, 1]) given as feedback, by pool.",
            ["pool"],
            registry=registry,
        )
        self._rating_sum = Gauge(  # a gauge: ratings may be negative, which a counter refuses
            "switchyard:fleet_online_eval_rating_sum",
            "The sum of ratings by pool: divided by fleet_online_eval_ratings_total, the mean rating.",
            ["pool"],
            registry=registry,
        )
        registry.register(_VerdictCollector(log))

    def observe_logged(self, exchange: LoggedExchange) -> None:
        shadow = str(exchange.shadow).lower()
        self._logged.labels(exchange.pool, shadow).inc()
        self._latency.labels(exchange.pool, shadow).observe(exchange.latency)
        self._cost.labels(exchange.pool, shadow).inc(exchange.cost)

    def observe_feedback(self, pool: str, rating: float | None) -> None:
        self._feedback.labels(pool).inc()
        if rating is not None:
            self._ratings.labels(pool).inc()
            self._rating_sum.labels(pool).inc(rating)


class _VerdictCollector(Collector):
    def __init__(self, log: OnlineEvalLog) -> None:
        self._log = log

    def collect(self) -> Iterator[Metric]:
        judged = GaugeMetricFamily(
            "switchyard:fleet_online_eval_judged",
            "Logged answers a judge graded (switchyard eval online), by pool, shadow and judge.",
            labels=["pool", "shadow", "judge"],
        )
        passed = GaugeMetricFamily(
            "switchyard:fleet_online_eval_judge_passed",
            "Of the judged answers, those that passed: divided by fleet_online_eval_judged, the pass rate.",
            labels=["pool", "shadow", "judge"],
        )
        for pool, shadow, judge, count, passes in self._log.verdict_counts():
            labels = [pool, str(shadow).lower(), judge]
            judged.add_metric(labels, count)
            passed.add_metric(labels, passes)
        yield judged
        yield passed
