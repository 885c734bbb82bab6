"""Prometheus metrics of one server, named like vLLM's (`switchyard:` instead of `vllm:`) so dashboards carry over.

Everything is registered in a CollectorRegistry owned by the app, never the process-global one, so two apps in
one process (as in tests) keep separate counts. The values come from the async engine's step reports, observed
on the event loop right after each step: timings are the engine's own marks, not the time a slow client took
to read them.

Label values come only from bounded sets: finish reasons, priorities, events, the tenants an operator configured,
and the first `max_extra_tenants` other tenant names seen (a fleet gateway in front names its tenants in `user`).
Every tenant past those is counted as "other", so a client's free-form `user` field cannot grow the exposition
without bound; text the exposition cannot encode never gets this far (the server refuses it at the edge).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from switchyard.engine.async_engine import StepReport
from switchyard.engine.sequence import RequestOutput

CONTENT_TYPE = CONTENT_TYPE_LATEST

OTHER_TENANT = "other"
"""The label of every tenant past the configured ones and the first few others."""
DEFAULT_MAX_EXTRA_TENANTS = 64
"""Tenants beyond the configured ones labelled by name (first come): enough for a fleet gateway's tenants, few
enough that the exposition stays small (each adds about 25 series)."""

_FAST_BUCKETS = (0.001, 0.003, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0)
_LATENCY_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    *(20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0),
)


class ServerMetrics:
    """The server's metrics and the per-request marks needed to derive them from step reports."""

    def __init__(
        self,
        model_name: str,
        tenants: frozenset[str] = frozenset({"default"}),
        max_extra_tenants: int = DEFAULT_MAX_EXTRA_TENANTS,
    ) -> None:
        self._tenants = tenants
        self._extra_tenants: set[str] = set()
        self._max_extra_tenants = max_extra_tenants
        self.registry = CollectorRegistry()
        labels = ["model_name"]

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=self.registry).labels(model_name)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=self.registry).labels(model_name)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry).labels(model_name)

        self.time_to_first_token = histogram(
            "switchyard:time_to_first_token_seconds",
            "Seconds from arrival to the first generated token.",
            _LATENCY_BUCKETS,
        )
        self.inter_token_latency = histogram(
            "switchyard:inter_token_latency_seconds",
            "Seconds between successive engine steps that gave a request new tokens.",
            (*_FAST_BUCKETS, 2.5, 5.0, 10.0),
        )
        self.e2e_latency = histogram(
            "switchyard:e2e_request_latency_seconds", "Seconds from arrival to finish.", _LATENCY_BUCKETS
        )
        self.queue_time = histogram(
            "switchyard:request_queue_time_seconds",
            "Seconds from arrival to first scheduling.",
            _LATENCY_BUCKETS,
        )
        self.prefill_time = histogram(
            "switchyard:request_prefill_time_seconds",
            "Seconds from first scheduling to the first token.",
            _LATENCY_BUCKETS,
        )
        self.decode_time = histogram(
            "switchyard:request_decode_time_seconds",
            "Seconds from the first token to finish.",
            _LATENCY_BUCKETS,
        )
        self.prompt_tokens = counter("switchyard:prompt_tokens", "Prompt tokens of admitted requests.")
        self.generation_tokens = counter("switchyard:generation_tokens", "Generated tokens.")
        self.num_preemptions = counter("switchyard:num_preemptions", "Sequences preempted by recompute.")
        self.num_running = gauge("switchyard:num_requests_running", "Sequences in the running batch.")
        self.num_waiting = gauge("switchyard:num_requests_waiting", "Sequences waiting to be scheduled.")
        self.kv_cache_usage = gauge(
            "switchyard:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1)."
        )
        self._success = Counter(
            "switchyard:request_success",
            "Finished requests, by the finish reason of their first choice.",
            [*labels, "finished_reason"],
            registry=self.registry,
        )
        self._rejected = Counter(
            "switchyard:request_rejected",
            "Requests refused before admission, by reason (queue_full, invalid, ...).",
            [*labels, "reason"],
            registry=self.registry,
        )
        self.prefix_cache_queries = counter(
            "switchyard:prefix_cache_queries", "Prompt tokens looked up in the prefix cache."
        )
        self.prefix_cache_hits = counter(
            "switchyard:prefix_cache_hits", "Prompt tokens found in the prefix cache."
        )
        self.prefix_cache_hit_rate = gauge(
            "switchyard:prefix_cache_hit_rate", "Cached share of looked-up prompt tokens since start (0-1)."
        )
        self.spec_acceptance_rate = gauge(
            "switchyard:spec_decode_acceptance_rate",
            "Speculative decoding: accepted share of proposed tokens since start (0-1; 0 without speculation).",
        )
        self.spec_mean_accepted_length = gauge(
            "switchyard:spec_decode_mean_accepted_length",
            "Speculative decoding: tokens emitted per verifying sequence-step since start (accepted drafts plus the "
            "bonus or corrected token; 0 without speculation).",
        )
        self._preemptions_by_priority = Counter(
            "switchyard:num_preemptions_by_priority",
            "Sequences preempted by recompute, by the priority of the preempted request.",
            [*labels, "priority"],
            registry=self.registry,
        )
        self._kv_full = Counter(
            "switchyard:kv_cache_full_decisions",
            "What requests met a full KV cache: queued, preempted (a less urgent one) or rejected.",
            [*labels, "decision"],
            registry=self.registry,
        )
        self._tenant_tokens = Counter(
            "switchyard:tenant_tokens",
            "Tokens computed (prefill and decode) for each tenant.",
            [*labels, "tenant"],
            registry=self.registry,
        )
        self._tenant_queue_time = Histogram(
            "switchyard:tenant_queue_time_seconds",
            "Seconds from arrival to first scheduling, by tenant.",
            [*labels, "tenant"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.hung_steps = counter(
            "switchyard:engine_hung_steps", "Engine steps the watchdog found hung (the engine was rebuilt)."
        )
        self._grammar_events = Counter(
            "switchyard:structured_output_events",
            "Structured outputs: grammars compiled, compile cache hits, compile failures, tokens a grammar refused, "
            "finished outputs checked against their spec.",
            [*labels, "event"],
            registry=self.registry,
        )
        self._grammar_seconds = Counter(
            "switchyard:structured_output_seconds",
            "Structured outputs: seconds compiling grammars (phase=compile) and masking logits (phase=mask).",
            [*labels, "phase"],
            registry=self.registry,
        )
        self._grammar_invalid = Counter(
            "switchyard:structured_output_invalid",
            "Structured outputs: finished outputs that broke their schema, regex or choice, by grammar backend and "
            "construct (a JSON Schema keyword or the spec kind). A backend bug; each such request failed.",
            [*labels, "backend", "construct"],
            registry=self.registry,
        )
        self._seen_invalid: dict[tuple[str, str], int] = {}
        self._spec_tokens = Counter(
            "switchyard:spec_decode_tokens",
            "Speculative decoding: tokens proposed, accepted, and emitted by verification (kind label); "
            "acceptance rate = accepted / proposed, mean accepted length per step = emitted / steps.",
            [*labels, "kind"],
            registry=self.registry,
        )
        self._expert_tokens = Counter(
            "switchyard:moe_expert_tokens",
            "Mixture-of-experts models: tokens the router sent to each expert of each sparse layer since load "
            "(each token counts once per expert of its top-k). Read from the device at most once a second.",
            [*labels, "layer", "expert"],
            registry=self.registry,
        )
        self._seen_expert_tokens: dict[tuple[int, int], int] = {}
        self._expert_snapshot: dict[tuple[int, int], int] | None = None
        self._seen_hung = 0
        self._seen_labelled: dict[tuple[str, str], int] = {}
        self._seen_cache = (0, 0)
        self._model_name = model_name
        self._seen_prompt_tokens = 0
        self._seen_generation_tokens = 0
        self._seen_preemptions = 0
        self._last_token_time: dict[str, float] = {}

    def observe_step(self, report: StepReport) -> None:
        """Update everything from one step report (called by the async engine after each step)."""
        stats = report.stats
        self.num_running.set(stats.num_running)
        self.num_waiting.set(stats.num_waiting)
        self.kv_cache_usage.set(stats.kv_cache_usage)
        self.prompt_tokens.inc(max(0, report.num_prompt_tokens - self._seen_prompt_tokens))
        self.generation_tokens.inc(max(0, report.num_generated_tokens - self._seen_generation_tokens))
        self.num_preemptions.inc(max(0, stats.num_preemptions - self._seen_preemptions))
        self._seen_prompt_tokens = report.num_prompt_tokens
        self._seen_generation_tokens = report.num_generated_tokens
        self._seen_preemptions = stats.num_preemptions
        queries, hits = stats.prefix_cache_queries, stats.prefix_cache_hits
        self.prefix_cache_queries.inc(max(0, queries - self._seen_cache[0]))
        self.prefix_cache_hits.inc(max(0, hits - self._seen_cache[1]))
        self._seen_cache = (queries, hits)
        self.hung_steps.inc(max(0, stats.num_hung_steps - self._seen_hung))
        self._seen_hung = stats.num_hung_steps
        self.prefix_cache_hit_rate.set(hits / queries if queries else 0.0)
        self._advance(self._preemptions_by_priority, "priority", stats.preemptions_by_priority)
        self._advance(self._kv_full, "decision", stats.kv_full_decisions)
        self._advance(self._tenant_tokens, "tenant", stats.tenant_tokens)
        self._advance(self._grammar_events, "event", stats.grammar_events)
        self._advance(self._grammar_seconds, "phase", stats.grammar_seconds)
        self._advance(self._spec_tokens, "kind", stats.spec_decode)
        if stats.expert_tokens is not self._expert_snapshot:  # a new reading (at most one a second)
            self._expert_snapshot = stats.expert_tokens
            for (layer, expert), total in stats.expert_tokens.items():
                seen = self._seen_expert_tokens.get((layer, expert), 0)
                if total > seen:
                    self._expert_tokens.labels(self._model_name, str(layer), str(expert)).inc(total - seen)
                    self._seen_expert_tokens[(layer, expert)] = total
        for (backend, construct), total in stats.grammar_invalid_outputs.items():
            seen = self._seen_invalid.get((backend, construct), 0)
            if total > seen:
                self._grammar_invalid.labels(self._model_name, backend, construct).inc(total - seen)
                self._seen_invalid[(backend, construct)] = total
        spec = stats.spec_decode
        if spec.get("proposed"):
            self.spec_acceptance_rate.set(spec["accepted"] / spec["proposed"])
        if spec.get("steps"):
            self.spec_mean_accepted_length.set(spec["emitted"] / spec["steps"])
        for output in report.outputs:
            self._observe_output(output, report.time)

    def _advance(self, metric: Counter, kind: str, totals: dict) -> None:  # type: ignore[type-arg]
        """Move a labelled counter up to the engine's cumulative totals."""
        if kind == "tenant":  # summed per label first, so what is remembered here stays bounded too
            by_label: dict[str, float] = {}
            for tenant, total in totals.items():
                label = self.tenant_label(str(tenant))
                by_label[label] = by_label.get(label, 0) + total
            totals = by_label
        for label, total in totals.items():
            key = (kind, str(label))
            seen = self._seen_labelled.get(key, 0)
            if total > seen:
                metric.labels(self._model_name, str(label) or "default").inc(total - seen)
                self._seen_labelled[key] = total

    def tenant_label(self, tenant: str | None) -> str:
        """A tenant's label value: "default" for none, its name if configured or among the first
        `max_extra_tenants` others seen, "other" for the rest."""
        if not tenant:
            return "default"
        if tenant in self._tenants or tenant in self._extra_tenants:
            return tenant
        if len(self._extra_tenants) < self._max_extra_tenants:
            self._extra_tenants.add(tenant)
            return tenant
        return OTHER_TENANT

    def observe_rejection(self, reason: str) -> None:
        self._rejected.labels(self._model_name, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _observe_output(self, output: RequestOutput, when: float) -> None:
        has_tokens = any(c.delta_token_ids for c in output.outputs)
        request_id = output.request_id
        if has_tokens:
            last = self._last_token_time.get(request_id)
            if last is None:
                ttft = output.metrics.time_to_first_token if output.metrics else None
                if ttft is not None:
                    self.time_to_first_token.observe(ttft)
            else:
                self.inter_token_latency.observe(when - last)
            self._last_token_time[request_id] = when
        if output.finished:
            self._last_token_time.pop(request_id, None)
            self._observe_finished(output)

    def _observe_finished(self, output: RequestOutput) -> None:
        reason = output.outputs[0].finish_reason if output.outputs else None
        self._success.labels(self._model_name, reason or "abort").inc()
        metrics = output.metrics
        if metrics is None or metrics.finished_time is None:
            return
        self.e2e_latency.observe(metrics.finished_time - metrics.arrival_time)
        if metrics.first_scheduled_time is not None:
            self.queue_time.observe(metrics.first_scheduled_time - metrics.arrival_time)
            self._tenant_queue_time.labels(self._model_name, self.tenant_label(output.tenant)).observe(
                metrics.first_scheduled_time - metrics.arrival_time
            )
            if metrics.first_token_time is not None:
                self.prefill_time.observe(metrics.first_token_time - metrics.first_scheduled_time)
        if metrics.first_token_time is not None:
            self.decode_time.observe(metrics.finished_time - metrics.first_token_time)
