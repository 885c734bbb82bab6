"""One replica as the gateway sees it: where it listens, whether it may take work, and how loaded it is."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class ReplicaHealth(enum.Enum):
    STARTING = "starting"
    """Launched, not yet answering /health."""
    HEALTHY = "healthy"
    """Routable."""
    EJECTED = "ejected"
    """Its circuit breaker is open after failures or timeouts; probed until it answers again."""
    DRAINING = "draining"
    """Finishing what it has; takes nothing new."""
    DEAD = "dead"
    """Its process or actor is gone; the launcher restarts it (a --worker URL is probed instead)."""


@dataclass
class ReplicaLoad:
    """What the replica's own /metrics said at the last scrape (zeros until then)."""

    num_waiting: int = 0
    num_running: int = 0
    kv_cache_usage: float = 0.0
    """Fraction of KV cache blocks in use, 0..1."""
    scraped_at: float | None = None
    """time.monotonic() of the scrape; None before the first."""


@dataclass(eq=False)
class Replica:
    """A server behind the gateway. Identity is the object: a restarted replica keeps its object and name."""

    name: str
    """Unique in the fleet, e.g. `switchyard-chat-0`; the `replica` label of the fleet's metrics."""
    url: str
    """Base URL without /v1, e.g. http://127.0.0.1:8101."""
    model: str
    """The pool (model name clients send) it serves."""
    health: ReplicaHealth = ReplicaHealth.STARTING
    in_flight: int = 0
    """Requests the gateway has sent it that have not finished (counted by the gateway, always current)."""
    queued_prefill_tokens: int = 0
    """Prompt tokens the gateway has sent it, not expected cached there, whose requests have not yet had
    their first token back: the prefill work queued ahead of a new request (counted by the gateway)."""
    load: ReplicaLoad = field(default_factory=ReplicaLoad)

    @property
    def routable(self) -> bool:
        return self.health is ReplicaHealth.HEALTHY
