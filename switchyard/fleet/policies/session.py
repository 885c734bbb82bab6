"""Session affinity: the same `user` (or `x-session-id`) goes to the same replica, whose cache holds its history.

Rendezvous hashing: each replica gets a score from hash(session, replica name) and the highest wins. When a
replica leaves, only the sessions it won move (each to its runner-up); the others keep their replica, which a
`hash % n` scheme would not. Names, not URLs, are hashed, so a restarted replica gets its sessions back.
Requests without a session go to the least loaded replica.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from switchyard.fleet.policies.base import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.policies.load import TurnTaker, least_loaded
from switchyard.fleet.replica import Replica


def rendezvous_score(session: str, replica_name: str) -> int:
    """A stable 64-bit score (the same in every process, unlike Python's salted `hash`)."""
    key = f"{len(session)}:{session}|{replica_name}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


class SessionPolicy(RoutingPolicy):
    name = "session"

    def __init__(self) -> None:
        self._turns = TurnTaker()

    def choose(self, request: RouteRequest, candidates: Sequence[Replica]) -> RouteDecision:
        session = request.session
        if session is None:
            return RouteDecision(least_loaded(candidates, self._turns), "least_load")
        chosen = max(candidates, key=lambda replica: (rendezvous_score(session, replica.name), replica.name))
        return RouteDecision(chosen, "session")
