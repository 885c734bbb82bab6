"""Routing policies, one file each, behind `base.RoutingPolicy`; `make_policy` builds one by its `--policy` name."""

from __future__ import annotations

from switchyard.fleet.policies.base import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.policies.round_robin import RoundRobinPolicy

POLICIES: dict[str, type[RoutingPolicy]] = {
    RoundRobinPolicy.name: RoundRobinPolicy,
}
"""Every policy by its `--policy` name."""


def make_policy(name: str) -> RoutingPolicy:
    """A fresh policy (each pool has its own state); ValueError naming the choices for an unknown name."""
    policy = POLICIES.get(name)
    if policy is None:
        raise ValueError(f"unknown routing policy {name!r}; choose one of {', '.join(sorted(POLICIES))}")
    return policy()


__all__ = ["POLICIES", "RouteDecision", "RouteRequest", "RoutingPolicy", "make_policy"]
