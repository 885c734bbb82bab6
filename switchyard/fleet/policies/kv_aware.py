"""KV aware: route by what the replicas report they have cached, weighed against their load.

The replicas publish the chained hashes of the KV blocks they store and evict (GET /v1/kv_events, polled by
fleet/kv_events.py into fleet/kv_index.py). The gateway hashes the prompt's token ids the same way
(switchyard/prefix_hash.py) and counts, per candidate, the leading blocks it holds: `matched` tokens need no
prefill there. Each candidate's cost, in prompt tokens' worth of work, is

    cost = (prompt tokens - matched tokens) + queued_prefill_weight x queued tokens + request_cost_tokens x load

`queued tokens` are the prefill queued ahead of this request there: the uncached prompt tokens the gateway
sent there whose requests have not had their first token back (`Replica.queued_prefill_tokens`, counted by
the proxy, always current), less the part of it this request shares (its leading blocks there only as routed,
not yet reported stored), since that part is not work added by sending it there.
`load` is as every load-minded policy measures it (policies/load.py): a request already queued or running
there is taken to delay this one as much as prefilling `request_cost_tokens` tokens would. The cheapest
replica wins ("cache_hit" when it holds some of the prompt, else "cache_miss"; ties in turn). Before that,
the same imbalance guard as cache_aware sends the request to the least loaded replica ("balance").

Routing a request records its blocks for the chosen replica at once, lapsing unless events confirm them
(kv_index.py), so a burst of same-prefix requests lands together before any event arrives.
`predicted_cached_tokens` is the chosen replica's matched tokens, to compare with the `cached_tokens` it reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from switchyard.fleet.kv_events import KVEventSubscriber
from switchyard.fleet.kv_index import KVIndex
from switchyard.fleet.policies.base import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.policies.load import TurnTaker, is_imbalanced, least_loaded, replica_load
from switchyard.fleet.replica import Replica
from switchyard.prefix_hash import prompt_block_hashes


@dataclass(frozen=True)
class KVAwareConfig:
    request_cost_tokens: float = 128
    """Prompt tokens of prefill one request of load is worth: higher spreads the load, lower chases caches."""
    queued_prefill_weight: float = 0.5
    """Weight of the queued tokens (prefill routed to a replica whose first token has not come back). A request count
    cannot tell a replica prefilling two new 1k-token prefixes from one streaming two cached turns; this can, so
    new prefixes spread by the work they bring. Under 1: leaving a cached prefix adds its prefill to the fleet's
    work, while the queued work gets done wherever this request goes."""
    balance_abs_threshold: float = 64
    """As cache_aware's: with the relative test, the load gap past which load alone decides."""
    balance_rel_threshold: float = 1.5
    pending_ttl: float = 5.0
    """Seconds a routed request's blocks count as cached on its replica before events confirm them."""
    poll_interval: float = 0.5
    """Seconds between polls of each replica's KV events. A routed request's blocks count at once (`pending_ttl`),
    so events only confirm them and report evictions: at 0.1 s the polls cost the gateway and the replicas CPU
    for nothing the routing used (benchmarks/fleet_routing.py, tenants: hit rate 88.5% either way, gateway CPU
    4.4 -> 3.8 s, predicted cached tokens 99.1% -> 98.2% of the reported)."""
    default_block_size: int = 16
    """Block size to hash with for a replica that has not answered yet (Switchyard's default)."""

    def __post_init__(self) -> None:
        if self.request_cost_tokens < 0 or self.queued_prefill_weight < 0:
            raise ValueError("request_cost_tokens and queued_prefill_weight must be >= 0")
        if self.balance_abs_threshold < 0 or self.balance_rel_threshold < 1:
            raise ValueError("balance_abs_threshold must be >= 0 and balance_rel_threshold >= 1")
        if self.pending_ttl < 0 or self.poll_interval <= 0 or self.default_block_size < 1:
            raise ValueError("pending_ttl must be >= 0, poll_interval > 0 and default_block_size >= 1")


class KVAwarePolicy(RoutingPolicy):
    name = "kv_aware"
    needs_tokens = True
    config_type = KVAwareConfig

    def __init__(self, config: KVAwareConfig | None = None, index: KVIndex | None = None) -> None:
        self.config = config or KVAwareConfig()
        self.index = index or KVIndex(self.config.pending_ttl)
        self.subscriber = KVEventSubscriber(self.index, interval=self.config.poll_interval)
        self._turns = TurnTaker()
        self._hashed: tuple[RouteRequest | None, dict[int, list[int]]] = (None, {})
        """The last request's block hashes by block size, so `on_routed` need not hash it again."""

    def choose(self, request: RouteRequest, candidates: Sequence[Replica]) -> RouteDecision:
        tokens = request.token_ids
        if tokens is None:  # the gateway could not tokenize this prompt: no cache model, load only
            return RouteDecision(least_loaded(candidates, self._turns), "least_load")
        config = self.config
        loads = [replica_load(replica) for replica in candidates]
        held = [self._held_tokens(request, replica) for replica in candidates]
        matched = [hit for hit, _ in held]
        if is_imbalanced(loads, config.balance_abs_threshold, config.balance_rel_threshold):
            chosen = least_loaded(candidates, self._turns)
            return RouteDecision(chosen, "balance", matched[candidates.index(chosen)])
        # the prefill queued there, less the part this request shares (not work added by sending it there)
        queued = [
            max(0, replica.queued_prefill_tokens - shared)
            for replica, (_, shared) in zip(candidates, held, strict=True)
        ]
        costs = [
            (len(tokens) - hit) + config.queued_prefill_weight * waiting + config.request_cost_tokens * load
            for hit, waiting, load in zip(matched, queued, loads, strict=True)
        ]
        cheapest = min(costs)
        chosen = self._turns.pick([r for r, cost in zip(candidates, costs, strict=True) if cost == cheapest])
        hit = matched[candidates.index(chosen)]
        return RouteDecision(chosen, "cache_hit" if hit else "cache_miss", hit)

    def on_routed(self, request: RouteRequest, decision: RouteDecision) -> None:
        if request.token_ids is not None:
            replica = decision.replica
            self.index.record_routed(replica, self._block_hashes(request, self._block_size(replica)))

    def on_replica_removed(self, replica: Replica) -> None:
        self.index.drop(replica)
        self.subscriber.forget(replica)

    async def start(self, replicas: Callable[[], Sequence[Replica]], http: httpx.AsyncClient) -> None:
        await self.subscriber.start(replicas, http)

    async def stop(self) -> None:
        await self.subscriber.stop()

    def _held_tokens(self, request: RouteRequest, replica: Replica) -> tuple[int, int]:
        """Prompt tokens the replica should find cached (its leading held blocks, but never the prompt's last
        token, which the engine always computes: its logits are needed), and how many of those are there only
        as routed, maybe still in another request's prefill."""
        assert request.token_ids is not None
        block_size = self._block_size(replica)
        usable = (len(request.token_ids) - 1) // block_size
        hashes = self._block_hashes(request, block_size)[:usable]
        held, pending = self.index.leading_held(replica, hashes)
        return held * block_size, pending * block_size

    def _block_size(self, replica: Replica) -> int:
        return self.index.block_size(replica) or self.config.default_block_size

    def _block_hashes(self, request: RouteRequest, block_size: int) -> list[int]:
        assert request.token_ids is not None
        last, by_size = self._hashed
        if last is not request:
            by_size = {}
            self._hashed = (request, by_size)
        hashes = by_size.get(block_size)
        if hashes is None:
            hashes = by_size[block_size] = prompt_block_hashes(request.token_ids, block_size)
        return hashes
