"""Cache aware (SGLang router's policy): send a prompt where similar prompts went, unless the pool is lopsided.

Per replica, a radix tree of the prompt texts routed there (fleet/prefix_tree.py) stands in for its KV cache.
For each request:
1. If the pool is imbalanced (busiest - idlest > `balance_abs_threshold` AND busiest > `balance_rel_threshold`
   x idlest, loads as `load.replica_load`), the least loaded replica takes it: "balance".
2. Else, if some replica's tree shares more than `cache_threshold` of the prompt's text, the one sharing the
   most takes it (the less loaded among equals): "cache_hit".
3. Else the replica whose tree is smallest, the one with the most cache to spare, takes it: "cache_miss".
The chosen replica's tree then gets the prompt (in `on_routed`). Defaults are sglang-router's current ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from switchyard.fleet.policies.base import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.policies.load import TurnTaker, is_imbalanced, least_loaded, replica_load
from switchyard.fleet.prefix_tree import PrefixTree
from switchyard.fleet.replica import Replica


@dataclass(frozen=True)
class CacheAwareConfig:
    cache_threshold: float = 0.3
    """Share of the prompt's text (0-1) a replica's tree must already hold for the request to follow it."""
    balance_abs_threshold: float = 64
    """Requests the busiest replica must have over the idlest (with the relative test) to route by load."""
    balance_rel_threshold: float = 1.5
    """How many times the idlest's load the busiest's must be (with the absolute test) to route by load."""
    max_tree_chars: int = 1 << 24
    """Characters each replica's tree keeps before its least recently used prompts are forgotten."""

    def __post_init__(self) -> None:
        if not 0 <= self.cache_threshold <= 1:
            raise ValueError("cache_threshold must be in [0, 1]")
        if self.balance_abs_threshold < 0 or self.balance_rel_threshold < 1:
            raise ValueError("balance_abs_threshold must be >= 0 and balance_rel_threshold >= 1")
        if self.max_tree_chars < 1:
            raise ValueError("max_tree_chars must be >= 1")


class CacheAwarePolicy(RoutingPolicy):
    name = "cache_aware"
    config_type = CacheAwareConfig

    def __init__(self, config: CacheAwareConfig | None = None) -> None:
        self.config = config or CacheAwareConfig()
        self._trees: dict[Replica, PrefixTree] = {}
        self._turns = TurnTaker()

    def choose(self, request: RouteRequest, candidates: Sequence[Replica]) -> RouteDecision:
        config = self.config
        loads = [replica_load(replica) for replica in candidates]
        if is_imbalanced(loads, config.balance_abs_threshold, config.balance_rel_threshold):
            return RouteDecision(least_loaded(candidates, self._turns), "balance")
        text = request.text
        matches = [self._tree(replica).match(text) for replica in candidates]
        longest = max(matches)
        if text and longest / len(text) > config.cache_threshold:
            best = [replica for replica, match in zip(candidates, matches, strict=True) if match == longest]
            return RouteDecision(least_loaded(best, self._turns), "cache_hit")
        smallest = min(self._tree(replica).num_chars for replica in candidates)
        roomiest = [replica for replica in candidates if self._tree(replica).num_chars == smallest]
        return RouteDecision(least_loaded(roomiest, self._turns), "cache_miss")

    def on_routed(self, request: RouteRequest, decision: RouteDecision) -> None:
        self._tree(decision.replica).insert(request.text)

    def on_replica_removed(self, replica: Replica) -> None:
        self._trees.pop(replica, None)

    def _tree(self, replica: Replica) -> PrefixTree:
        tree = self._trees.get(replica)
        if tree is None:
            tree = self._trees[replica] = PrefixTree(self.config.max_tree_chars)
        return tree
