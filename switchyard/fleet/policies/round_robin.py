"""Round robin: each routable replica in turn, regardless of load or cache."""

from __future__ import annotations

from collections.abc import Sequence

from switchyard.fleet.policies.base import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.replica import Replica


class RoundRobinPolicy(RoutingPolicy):
    name = "round_robin"

    def __init__(self) -> None:
        self._turn = 0

    def choose(self, request: RouteRequest, candidates: Sequence[Replica]) -> RouteDecision:
        replica = candidates[self._turn % len(candidates)]
        self._turn += 1
        return RouteDecision(replica, "round_robin")
