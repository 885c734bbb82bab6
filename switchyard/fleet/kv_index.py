"""Which replica holds which KV blocks, by chained block hash: the gateway's mirror of the replicas' caches.

Two sources fill it. The replicas' own events (fleet/kv_events.py polls GET /v1/kv_events) are the truth:
`stored`, `evicted`, or a `reset` that replaces everything known of a replica. But events trail the routing
by a prefill, so a burst of requests sharing a new prefix would scatter before the first one's blocks are
reported; hence the routing also records a request's blocks for its replica at once ("pending"), and such an
entry lapses after `pending_ttl` seconds unless an event confirms it first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from switchyard.fleet.replica import Replica


@dataclass
class ReplicaBlocks:
    """What is known of one replica's cache."""

    block_size: int | None = None
    """Tokens per block, as the replica reported; None before its first answer."""
    confirmed: set[int] = field(default_factory=set)
    """Block hashes the replica said it stored (and has not said it evicted)."""
    pending: dict[int, float] = field(default_factory=dict)
    """Block hashes routed there but not yet reported, each with the clock time it lapses at."""


class KVIndex:
    def __init__(self, pending_ttl: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        if pending_ttl < 0:
            raise ValueError("pending_ttl must be >= 0")
        self.pending_ttl = pending_ttl
        self._clock = clock
        self._replicas: dict[Replica, ReplicaBlocks] = {}
        self._next_purge = 0.0

    def blocks_of(self, replica: Replica) -> ReplicaBlocks:
        known = self._replicas.get(replica)
        if known is None:
            known = self._replicas[replica] = ReplicaBlocks()
        return known

    def block_size(self, replica: Replica) -> int | None:
        known = self._replicas.get(replica)
        return known.block_size if known is not None else None

    # ------------------------------------------------------------ from events
    def reset(self, replica: Replica, block_size: int, blocks: Iterable[int]) -> None:
        """The replica's whole cache is `blocks` (its snapshot). Pending entries stay: they describe requests
        routed since, which the snapshot may predate."""
        known = self.blocks_of(replica)
        known.block_size = block_size
        known.confirmed = set(blocks)

    def stored(self, replica: Replica, block_hash: int) -> None:
        known = self.blocks_of(replica)
        known.confirmed.add(block_hash)
        known.pending.pop(block_hash, None)

    def evicted(self, replica: Replica, block_hash: int) -> None:
        known = self.blocks_of(replica)
        known.confirmed.discard(block_hash)
        known.pending.pop(block_hash, None)

    def drop(self, replica: Replica) -> None:
        """Forget the replica (it restarted with an empty cache, or left)."""
        self._replicas.pop(replica, None)

    # ----------------------------------------------------------- from routing
    def record_routed(self, replica: Replica, block_hashes: Sequence[int]) -> None:
        """A prompt with these blocks was just sent to `replica`: count them as there until `pending_ttl`."""
        now = self._clock()
        known = self.blocks_of(replica)
        lapses = now + self.pending_ttl
        for block_hash in block_hashes:
            if block_hash not in known.confirmed:
                known.pending[block_hash] = lapses
        if now >= self._next_purge:
            self._purge(now)

    def leading_blocks(self, replica: Replica, block_hashes: Sequence[int]) -> int:
        """How many of `block_hashes`, from the first, the replica holds (confirmed, or pending and not
        lapsed): a cache hit covers a prompt's leading blocks only, up to the first one missing."""
        return self.leading_held(replica, block_hashes)[0]

    def leading_held(self, replica: Replica, block_hashes: Sequence[int]) -> tuple[int, int]:
        """`leading_blocks`, and how many of those are there only as routed (pending, not yet confirmed):
        blocks another request brings there, which may still be in its prefill."""
        known = self._replicas.get(replica)
        if known is None:
            return 0, 0
        now = self._clock()
        held = pending = 0
        for block_hash in block_hashes:
            if block_hash not in known.confirmed:
                if known.pending.get(block_hash, 0.0) <= now:
                    break
                pending += 1
            held += 1
        return held, pending

    def _purge(self, now: float) -> None:
        """Drop lapsed pending entries (at most once per `pending_ttl`, so routing stays cheap)."""
        for known in self._replicas.values():
            known.pending = {h: lapses for h, lapses in known.pending.items() if lapses > now}
        self._next_purge = now + self.pending_ttl
