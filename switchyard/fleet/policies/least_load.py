"""Least load: the replica with the fewest requests in flight from this gateway plus those its /metrics showed
waiting (and a little for a full KV cache); equally loaded replicas take turns."""

from __future__ import annotations

from collections.abc import Sequence

from switchyard.fleet.policies.base import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.policies.load import TurnTaker, least_loaded
from switchyard.fleet.replica import Replica


class LeastLoadPolicy(RoutingPolicy):
    name = "least_load"

    def __init__(self) -> None:
        self._turns = TurnTaker()

    def choose(self, request: RouteRequest, candidates: Sequence[Replica]) -> RouteDecision:
        return RouteDecision(least_loaded(candidates, self._turns), "least_load")
