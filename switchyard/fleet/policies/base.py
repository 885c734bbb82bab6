"""The routing-policy interface: given a request and the routable replicas of its pool, pick one.

A policy is a small class chosen per pool (`--policy`). It sees only what the gateway knows without asking a
replica (its own in-flight counts, the last scraped load, and what it learnt from earlier routing or, for
`kv_aware`, from the replicas' KV events), so a decision costs microseconds, not a round trip.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from switchyard.fleet.replica import Replica

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class RouteRequest:
    """What a policy may key on."""

    model: str
    text: str
    """The prompt as text: a completion's prompt, or a chat's message contents in order (the approximate
    trees of `cache_aware` key on it)."""
    session: str | None = None
    """The `user` field or the `x-session-id` header, for session affinity."""
    token_ids: tuple[int, ...] | None = None
    """The prompt as the replica will tokenize it; filled only for a policy whose `needs_tokens` is true."""


@dataclass(frozen=True)
class RouteDecision:
    replica: Replica
    reason: str
    """Why, as a short label for metrics (`round_robin`, `least_load`, `cache_hit`, `balance`, ...)."""
    predicted_cached_tokens: int = 0
    """Prompt tokens the policy expects the replica to find cached (0 when it has no model of the caches)."""


class RoutingPolicy(ABC):
    name: ClassVar[str]
    needs_tokens: ClassVar[bool] = False
    """True when `choose` needs `RouteRequest.token_ids` (the gateway then tokenizes the prompt)."""
    config_type: ClassVar[type[Any] | None] = None
    """The policy's options as a dataclass (its constructor's one argument), or None when it has none."""

    @abstractmethod
    def choose(self, request: RouteRequest, candidates: Sequence[Replica]) -> RouteDecision:
        """Pick one of `candidates`: non-empty, all routable, none already tried for this request."""

    def on_routed(self, request: RouteRequest, decision: RouteDecision) -> None:  # noqa: B027
        """The request was sent to `decision.replica` (a policy that learns from routing updates here)."""

    def on_replica_removed(self, replica: Replica) -> None:  # noqa: B027
        """The replica left the pool for good (or restarted with an empty cache): forget what was learnt."""

    async def start(  # noqa: B027
        self, replicas: Callable[[], Sequence[Replica]], http: httpx.AsyncClient
    ) -> None:
        """Begin background work, if the policy has any (kv_aware polls the replicas' KV events).

        `replicas` returns the pool's replicas as they are now (called again on every round, since replicas
        come and go); `http` is the gateway's client, which the policy must not close."""

    async def stop(self) -> None:  # noqa: B027
        """End what `start` began; the gateway calls it once, at shutdown."""
