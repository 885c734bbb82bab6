"""Routing policies, one file each, behind `base.RoutingPolicy`; `make_policy` builds one by its `--policy` name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from switchyard.fleet.policies.base import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.policies.cache_aware import CacheAwarePolicy
from switchyard.fleet.policies.kv_aware import KVAwarePolicy
from switchyard.fleet.policies.least_load import LeastLoadPolicy
from switchyard.fleet.policies.power_of_two import PowerOfTwoPolicy
from switchyard.fleet.policies.round_robin import RoundRobinPolicy
from switchyard.fleet.policies.session import SessionPolicy

POLICIES: dict[str, type[RoutingPolicy]] = {
    policy.name: policy
    for policy in (
        RoundRobinPolicy,
        LeastLoadPolicy,
        PowerOfTwoPolicy,
        SessionPolicy,
        CacheAwarePolicy,
        KVAwarePolicy,
    )
}
"""Every policy by its `--policy` name."""


def make_policy(name: str, options: Mapping[str, Any] | None = None) -> RoutingPolicy:
    """A fresh policy (each pool has its own state) with `options` (fields of its `config_type`, e.g.
    {"cache_threshold": 0.5}); ValueError naming the choices for an unknown name or option."""
    policy = POLICIES.get(name)
    if policy is None:
        raise ValueError(f"unknown routing policy {name!r}; choose one of {', '.join(sorted(POLICIES))}")
    if not options:
        return policy()
    config_type = policy.config_type
    if config_type is None:
        raise ValueError(f"routing policy {name!r} takes no options")
    fields = {field.name for field in dataclasses.fields(config_type)}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError(
            f"routing policy {name!r} has no option {', '.join(unknown)}; its options: {', '.join(sorted(fields))}"
        )
    return policy(config_type(**options))  # type: ignore[call-arg]


__all__ = ["POLICIES", "RouteDecision", "RouteRequest", "RoutingPolicy", "make_policy"]
