"""How loaded a replica looks to the gateway: one number every load-minded policy compares the same way."""

from __future__ import annotations

from collections.abc import Sequence

from switchyard.fleet.replica import Replica

KV_USAGE_WEIGHT = 2.0
"""Requests a replica with a full KV cache counts as on top of its queue: near full, new work waits for blocks
(or preempts), yet usage alone says nothing of how long, so it only tips the balance between equal queues."""


def replica_load(replica: Replica) -> float:
    """Requests this gateway has in flight there (always current) plus the requests its last /metrics scrape saw
    waiting (other clients' included), plus a KV-usage term. Running requests are not added: the gateway's own
    are in `in_flight` already."""
    load = replica.load
    return replica.in_flight + load.num_waiting + KV_USAGE_WEIGHT * load.kv_cache_usage


def is_imbalanced(loads: Sequence[float], abs_threshold: float, rel_threshold: float) -> bool:
    """SGLang router's test: the busiest replica has more than `abs_threshold` requests over the idlest AND more
    than `rel_threshold` times as many. Then caches wait and the idlest replica gets the request."""
    if not loads:
        return False
    busiest, idlest = max(loads), min(loads)
    return busiest - idlest > abs_threshold and busiest > rel_threshold * idlest


class TurnTaker:
    """Breaks ties in turn, so equally good replicas share the work instead of the first always winning."""

    def __init__(self) -> None:
        self._turn = 0

    def pick(self, tied: Sequence[Replica]) -> Replica:
        replica = tied[self._turn % len(tied)]
        self._turn += 1
        return replica


def least_loaded(candidates: Sequence[Replica], turns: TurnTaker) -> Replica:
    """The candidate with the lowest `replica_load`; ties in turn."""
    loads = [replica_load(replica) for replica in candidates]
    lowest = min(loads)
    return turns.pick([replica for replica, load in zip(candidates, loads, strict=True) if load == lowest])
