"""Per-team quotas: a guaranteed number of GPUs, a weight for sharing what is left, and whether to borrow.

A team running within its guarantee is never preempted for another team's sake (only for a higher class);
GPUs it holds beyond the guarantee are borrowed and are reclaimed first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TeamQuota:
    team: str
    guaranteed_gpus: int
    weight: float = 1.0
    """Share of GPU-time beyond guarantees, relative to other teams."""
    can_borrow: bool = True
    """May run beyond its guarantee on idle GPUs (reclaimable)."""

    def __post_init__(self) -> None:
        if self.guaranteed_gpus < 0 or self.weight <= 0:
            raise ValueError(f"team {self.team!r}: guaranteed_gpus must be >= 0 and weight > 0")


DEFAULT_QUOTA = TeamQuota(team="*", guaranteed_gpus=0, weight=1.0)
"""For a team with no quota set: no guarantee, weight 1, may borrow."""


def quota_for(quotas: Mapping[str, TeamQuota], team: str) -> TeamQuota:
    return quotas.get(team, DEFAULT_QUOTA)


def weighted_entitlement(
    capacity: float, demand: Mapping[str, float], weights: Mapping[str, float]
) -> dict[str, float]:
    """Max-min fair split of `capacity` by weight, no team getting more than it demands (water-filling).

    The fairness metric compares each team's GPU-time with this; the policy orders teams by the same idea.
    """
    share = {team: 0.0 for team in demand}
    active = {team for team, want in demand.items() if want > 0}
    left = float(capacity)
    while active and left > 1e-9:
        total_weight = sum(weights.get(team, 1.0) for team in sorted(active))
        per_weight = left / total_weight
        satisfied = {
            team
            for team in active
            if demand[team] - share[team] <= per_weight * weights.get(team, 1.0) + 1e-12
        }
        if not satisfied:
            for team in active:
                share[team] += per_weight * weights.get(team, 1.0)
            break
        for team in sorted(satisfied):
            left -= demand[team] - share[team]
            share[team] = demand[team]
        active -= satisfied
    return share
