"""Power of two choices: two replicas at random, the less loaded of them.

Nearly as even as least load, but two replicas' loads are compared rather than all of them, and concurrent
gateways (or one whose load figures lag) do not all pile onto the same idlest replica.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from switchyard.fleet.policies.base import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.policies.load import replica_load
from switchyard.fleet.replica import Replica


@dataclass(frozen=True)
class PowerOfTwoConfig:
    seed: int | None = None
    """Seeds the random draws, so a run can be replayed; None draws from the system's entropy."""


class PowerOfTwoPolicy(RoutingPolicy):
    name = "power_of_two"
    config_type = PowerOfTwoConfig

    def __init__(self, config: PowerOfTwoConfig | None = None) -> None:
        self.config = config or PowerOfTwoConfig()
        self._random = random.Random(self.config.seed)

    def choose(self, request: RouteRequest, candidates: Sequence[Replica]) -> RouteDecision:
        if len(candidates) == 1:
            return RouteDecision(candidates[0], "power_of_two")
        first, second = self._random.sample(list(candidates), 2)
        chosen = second if replica_load(second) < replica_load(first) else first
        return RouteDecision(chosen, "power_of_two")
