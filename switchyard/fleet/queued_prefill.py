"""The prefill a request brings to its replica, counted there until its first token comes back.

A replica's time to first token is mostly the prefill queued ahead of a request, which the replica's
/metrics show only as a request count, a scrape late, and its KV events as stored blocks, a poll late. The
gateway sees the first token of every answer pass through it, so it can count the queue exactly and at once:
a request's uncached prompt tokens are added to its replica's `queued_prefill_tokens` when it is sent and taken
off at its first token (or its end, or its failure), whichever comes first.
"""

from __future__ import annotations

from switchyard.fleet.policies.base import RouteDecision, RouteRequest
from switchyard.fleet.replica import Replica


class QueuedPrefill:
    def __init__(self, replica: Replica, tokens: int) -> None:
        self._replica = replica
        self._tokens = tokens
        replica.queued_prefill_tokens += tokens

    @classmethod
    def of(cls, route: RouteRequest, decision: RouteDecision) -> QueuedPrefill:
        """The request's prompt tokens less those the policy expects cached; none when the prompt was not
        tokenized (only policies that need tokens have them)."""
        tokens = 0 if route.token_ids is None else len(route.token_ids) - decision.predicted_cached_tokens
        return cls(decision.replica, max(0, tokens))

    def settle(self) -> None:
        """The prefill is done, or will not be: counted off once however often this is called."""
        self._replica.queued_prefill_tokens -= self._tokens
        self._tokens = 0
