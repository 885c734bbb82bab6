"""A snapshot of the engine's counters, for metrics and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass, field

from switchyard.engine.expert_load import ExpertLoadMeter
from switchyard.engine.scheduler import Scheduler
from switchyard.engine.spec.decoder import SpecDecoder
from switchyard.engine.structured.manager import StructuredOutputManager


@dataclass
class EngineStats:
    """A snapshot of the engine's counters, taken on the engine thread (cumulative values since start)."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_preemptions: int
    num_free_blocks: int
    prefix_cache_queries: int = 0
    """Prompt tokens looked up in the prefix cache."""
    prefix_cache_hits: int = 0
    """Of those, tokens found cached."""
    preemptions_by_priority: dict[int, int] = field(default_factory=dict)
    kv_full_decisions: dict[str, int] = field(default_factory=dict)
    tenant_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens computed for each tenant (prefill and decode)."""
    num_hung_steps: int = 0
    grammar_events: dict[str, int] = field(default_factory=dict)
    """Structured outputs: grammars compiled, compile cache hits, compile failures, rejected tokens."""
    grammar_seconds: dict[str, float] = field(default_factory=dict)
    """Structured outputs: seconds spent compiling grammars and filling/applying token masks."""
    grammar_invalid_outputs: dict[tuple[str, str], int] = field(default_factory=dict)
    """Structured outputs: finished outputs that broke their spec, by (backend, construct); a backend bug."""
    spec_decode: dict[str, int] = field(default_factory=dict)
    """Speculative decoding: verifying sequence-steps, proposed, accepted and emitted tokens."""
    expert_tokens: dict[tuple[int, int], int] = field(default_factory=dict)
    """Mixture-of-experts models: tokens the router sent to each (layer, expert) since load."""


def collect_stats(
    scheduler: Scheduler,
    num_hung_steps: int,
    structured: StructuredOutputManager | None,
    spec_decoder: SpecDecoder | None,
    expert_load: ExpertLoadMeter | None = None,
) -> EngineStats:
    """The counters of the scheduler (its block manager and policy too), the grammars and speculation."""
    block_manager = scheduler.block_manager
    cache = block_manager.prefix_cache
    stats = EngineStats(
        num_running=scheduler.num_running,
        num_waiting=scheduler.num_waiting,
        kv_cache_usage=block_manager.usage,
        num_preemptions=scheduler.num_preemptions,
        num_free_blocks=block_manager.num_free_blocks,
        prefix_cache_queries=cache.num_queried_tokens if cache else 0,
        prefix_cache_hits=cache.num_hit_tokens if cache else 0,
        preemptions_by_priority=dict(scheduler.preemptions_by_priority),
        kv_full_decisions=dict(scheduler.kv_full_decisions),
        tenant_tokens=dict(getattr(scheduler.waiting, "tokens_served", {})),
        num_hung_steps=num_hung_steps,
        expert_tokens=expert_load.totals() if expert_load is not None else {},
    )
    if structured is not None:
        grammar = structured.stats
        stats.grammar_events = {
            "compiled": grammar.compiled,
            "cache_hit": grammar.cache_hits,
            "failed": grammar.failed,
            "rejected_token": grammar.rejected_tokens,
            "checked_output": grammar.checked_outputs,
        }
        stats.grammar_invalid_outputs = dict(grammar.invalid_outputs)
        stats.grammar_seconds = {"compile": grammar.compile_seconds, "mask": grammar.mask_seconds}
    if spec_decoder is not None:
        spec = spec_decoder.stats
        stats.spec_decode = {
            "steps": spec.steps,
            "proposed": spec.proposed,
            "accepted": spec.accepted,
            "emitted": spec.emitted,
        }
    return stats
