"""What the prefix cache did, as numbered events a router can replay: which block hashes were stored, evicted.

A router outside the process (the fleet's `kv_aware` policy) keeps its own picture of each replica's cache by
polling `read(after)` with the last sequence number it saw. The log is bounded: a reader that fell further
behind than the log reaches, or that comes from another log (`epoch`: a restarted engine, or an engine rebuilt
after a hung step), gets a snapshot of every cached block instead and starts again from there.
"""

from __future__ import annotations

import enum
import itertools
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass


class KVEventKind(enum.Enum):
    STORED = "stored"
    """A full block entered the prefix cache: a request with this prefix will find it."""
    EVICTED = "evicted"
    """The block left the cache (evicted for space, or the cache was reset)."""


@dataclass(frozen=True)
class KVEvent:
    seq: int
    kind: KVEventKind
    block_hash: int


@dataclass(frozen=True)
class KVEventBatch:
    """One read of the log: the events after the reader's cursor, or a snapshot that replaces its picture."""

    epoch: str
    """Names this log; a reader that saw another epoch must start over."""
    block_size: int
    """Tokens per block: the reader hashes prompts in blocks of this size."""
    events: tuple[KVEvent, ...]
    next: int
    """The sequence number to pass as `after` next time (the last event returned, or the log's last)."""
    reset: bool
    """True: `blocks` is the whole cache; the reader drops what it knew and takes `blocks` instead."""
    blocks: tuple[int, ...] = ()
    """Every cached block's hash, when `reset`."""


class KVEventLog:
    """A bounded, numbered log of prefix-cache events (sequence numbers start at 1 and never repeat)."""

    def __init__(self, block_size: int, capacity: int = 16384) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.block_size = block_size
        self.epoch = uuid.uuid4().hex
        self._events: deque[KVEvent] = deque(maxlen=capacity)
        self.last_seq = 0

    def record(self, kind: KVEventKind, block_hash: int) -> None:
        self.last_seq += 1
        self._events.append(KVEvent(self.last_seq, kind, block_hash))

    @property
    def first_seq(self) -> int:
        """The oldest event still held (last_seq + 1 when the log is empty)."""
        return self._events[0].seq if self._events else self.last_seq + 1

    def read(
        self,
        after: int,
        epoch: str | None,
        cached_blocks: Callable[[], Iterable[int]],
        max_events: int = 4096,
    ) -> KVEventBatch:
        """The events after `after`, at most `max_events` of them; a snapshot of `cached_blocks()` instead
        when `after` is negative, `epoch` names another log, or events after `after` were already dropped."""
        behind = after < self.first_seq - 1
        if after < 0 or after > self.last_seq or behind or (epoch is not None and epoch != self.epoch):
            return KVEventBatch(
                epoch=self.epoch,
                block_size=self.block_size,
                events=(),
                next=self.last_seq,
                reset=True,
                blocks=tuple(cached_blocks()),
            )
        start = after - self.first_seq + 1
        events = tuple(itertools.islice(self._events, start, start + max_events))
        return KVEventBatch(
            epoch=self.epoch,
            block_size=self.block_size,
            events=events,
            next=events[-1].seq if events else after,
            reset=False,
        )
