"""The gateway's Prometheus metrics, `switchyard:fleet_*`, in a registry the app owns (two gateways in one
process, as in tests, keep separate counts).

Events (requests, retries, cached tokens) are counted as they happen; state (queue depth, in-flight requests,
replica health, ejections, restarts) is read from the pools and launchers when /metrics is scraped, so it is
never stale and needs no bookkeeping of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from switchyard.fleet.pool import Pool
from switchyard.fleet.prices import PriceTable
from switchyard.fleet.replica import ReplicaHealth
from switchyard.fleet.usage import TokenUsage

CONTENT_TYPE = CONTENT_TYPE_LATEST
NO_REPLICA = "none"
"""The `replica` label of a request answered by the gateway itself (429 queue full, 503, ...)."""

_LATENCY_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    *(20.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)


class FleetMetrics:
    def __init__(
        self,
        pools: Sequence[Pool],
        restarts: Callable[[], dict[str, int]],
        prices: PriceTable | None = None,
    ) -> None:
        """`restarts`: replicas restarted after a crash so far, by pool (from the launchers)."""
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "switchyard:fleet_requests",
            "Requests answered, by pool, the replica that answered (none: the gateway itself), the routing "
            "decision and the status (an HTTP status, or stream_error for a stream cut off mid-way).",
            ["pool", "replica", "decision", "status"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "switchyard:fleet_request_latency_seconds",
            "Seconds from a request's arrival at the gateway to the end of its answer, by replica.",
            ["pool", "replica"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._first_byte = Histogram(
            "switchyard:fleet_time_to_first_byte_seconds",
            "Seconds from a request's arrival to the first byte of its answer (queueing and retries included).",
            ["pool", "replica"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._retries = Counter(
            "switchyard:fleet_retries",
            "Attempts that failed before the first byte and were retried elsewhere, by the replica that failed "
            "and why (connect_error, timeout, read_error, 429, 5xx).",
            ["pool", "replica", "reason"],
            registry=self.registry,
        )
        self._predicted_cached = Counter(
            "switchyard:fleet_predicted_cached_tokens",
            "Prompt tokens the routing policy expected the chosen replica to have cached.",
            ["pool", "replica"],
            registry=self.registry,
        )
        self._reported_cached = Counter(
            "switchyard:fleet_reported_cached_tokens",
            "Prompt tokens the replicas reported cached (usage.prompt_tokens_details.cached_tokens).",
            ["pool", "replica"],
            registry=self.registry,
        )
        self._tenant_requests = Counter(
            "switchyard:fleet_tenant_requests",
            "Requests a tenant's key sent, by model and outcome (answered, cache_hit, rate_limited, refused).",
            ["tenant", "model", "outcome"],
            registry=self.registry,
        )
        self._tenant_tokens = Counter(
            "switchyard:fleet_tenant_tokens",
            "Tokens a tenant used, by model and kind: prompt, cached (of the prompt, found in a replica's "
            "prefix cache) and output.",
            ["tenant", "model", "kind"],
            registry=self.registry,
        )
        self._tenant_cost = Counter(
            "switchyard:fleet_tenant_cost",
            "What a tenant's usage cost at the price table's prices, by model.",
            ["tenant", "model"],
            registry=self.registry,
        )
        self._cache_lookups = Counter(
            "switchyard:fleet_response_cache_lookups",
            "Requests that met the response cache, by result: hit, miss, bypass (Cache-Control) or "
            "uncacheable (not deterministic).",
            ["pool", "result"],
            registry=self.registry,
        )
        self._cache_entries = Gauge(
            "switchyard:fleet_response_cache_entries",
            "Answers held in the response cache.",
            registry=self.registry,
        )
        self._cascade_requests = Counter(
            "switchyard:fleet_cascade_requests",
            "Requests to a cascade, by the tier (pool) that answered and the outcome: accepted (the first "
            "tier's answer kept), escalated (a later tier answered) or error (no tier answered).",
            ["cascade", "answered_by", "outcome"],
            registry=self.registry,
        )
        self._cascade_decisions = Counter(
            "switchyard:fleet_cascade_decisions",
            "A judged tier's answer kept (accepted) or passed over (escalated), by tier and reason "
            "(confident, low_mean_logprob, low_token_logprob, truncated, unfinished, empty, no_logprobs, "
            "tier_error).",
            ["cascade", "tier", "decision", "reason"],
            registry=self.registry,
        )
        price_gauge = Gauge(
            "switchyard:fleet_price_per_million_tokens",
            "The price table: what 1M tokens of a model cost, by kind (input, cached_input, output).",
            ["model", "kind"],
            registry=self.registry,
        )
        for model, price in (prices.models if prices is not None else {}).items():
            price_gauge.labels(model, "input").set(float(price.input))
            price_gauge.labels(model, "cached_input").set(float(price.cached_input or 0))
            price_gauge.labels(model, "output").set(float(price.output))
        self.registry.register(_StateCollector(pools, restarts))

    def observe_request(self, pool: str, replica: str, decision: str, status: str, seconds: float) -> None:
        self._requests.labels(pool, replica, decision, status).inc()
        self._latency.labels(pool, replica).observe(seconds)

    def observe_first_byte(self, pool: str, replica: str, seconds: float) -> None:
        self._first_byte.labels(pool, replica).observe(seconds)

    def observe_retry(self, pool: str, replica: str, reason: str) -> None:
        self._retries.labels(pool, replica, reason).inc()

    def observe_cached_tokens(self, pool: str, replica: str, predicted: int, reported: int | None) -> None:
        self._predicted_cached.labels(pool, replica).inc(predicted)
        if reported is not None:
            self._reported_cached.labels(pool, replica).inc(reported)

    def observe_tenant_request(self, tenant: str, model: str, outcome: str) -> None:
        self._tenant_requests.labels(tenant, model, outcome).inc()

    def observe_tenant_usage(self, tenant: str, model: str, usage: TokenUsage, cost: float) -> None:
        self._tenant_tokens.labels(tenant, model, "prompt").inc(usage.prompt_tokens)
        self._tenant_tokens.labels(tenant, model, "cached").inc(usage.cached_tokens)
        self._tenant_tokens.labels(tenant, model, "output").inc(usage.output_tokens)
        self._tenant_cost.labels(tenant, model).inc(cost)

    def observe_cache_lookup(self, pool: str, result: str) -> None:
        self._cache_lookups.labels(pool, result).inc()

    def observe_cascade_request(self, cascade: str, answered_by: str, outcome: str) -> None:
        self._cascade_requests.labels(cascade, answered_by, outcome).inc()

    def observe_cascade_decision(self, cascade: str, tier: str, accepted: bool, reason: str) -> None:
        self._cascade_decisions.labels(cascade, tier, "accepted" if accepted else "escalated", reason).inc()

    def set_cache_entries(self, entries: int) -> None:
        self._cache_entries.set(entries)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    """The pools' and launchers' current state, read at scrape time."""

    def __init__(self, pools: Sequence[Pool], restarts: Callable[[], dict[str, int]]) -> None:
        self._pools = pools
        self._restarts = restarts

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "switchyard:fleet_queue_depth", "Requests waiting in the gateway for a replica.", labels=["pool"]
        )
        in_flight = GaugeMetricFamily(
            "switchyard:fleet_in_flight",
            "Requests the gateway has sent to a replica and not yet seen finish.",
            labels=["pool", "replica"],
        )
        queued_prefill = GaugeMetricFamily(
            "switchyard:fleet_queued_prefill_tokens",
            "Uncached prompt tokens the gateway has sent to a replica whose requests have no first token yet "
            "(counted for policies that tokenize prompts, kv_aware).",
            labels=["pool", "replica"],
        )
        health = GaugeMetricFamily(
            "switchyard:fleet_replica_health",
            "1 for a replica's current health state (starting, healthy, ejected, draining, dead).",
            labels=["pool", "replica", "state"],
        )
        ejections = CounterMetricFamily(
            "switchyard:fleet_ejections",
            "Times a replica was taken out of routing (failed requests or health checks).",
            labels=["pool", "replica"],
        )
        restarts = CounterMetricFamily(
            "switchyard:fleet_replica_restarts",
            "Replicas the fleet restarted after they crashed.",
            labels=["pool"],
        )
        restart_counts = self._restarts()
        for pool in self._pools:
            depth.add_metric([pool.name], pool.admission.depth)
            restarts.add_metric([pool.name], restart_counts.get(pool.name, 0))
            for replica in pool.replicas:
                in_flight.add_metric([pool.name, replica.name], replica.in_flight)
                queued_prefill.add_metric([pool.name, replica.name], replica.queued_prefill_tokens)
                for state in ReplicaHealth:
                    health.add_metric([pool.name, replica.name, state.value], float(replica.health is state))
                ejections.add_metric([pool.name, replica.name], pool.ejections[replica.name])
        yield from (depth, in_flight, queued_prefill, health, ejections, restarts)
