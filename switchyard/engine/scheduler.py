"""Iteration-level (continuous) batching with chunked prefill under a token budget.

Each step first gives every running sequence its next tokens (one for a decode, a chunk for a prefill in
progress), then admits waiting sequences with what is left of the budget. A long prompt therefore delays the
running decodes by at most one chunk. When KV blocks run out, the policy's victim is preempted by recompute:
its blocks are freed and it goes back to the front of the waiting queue with its tokens so far.

Ordering decisions (who waits first, who is preempted) belong to a `SchedulingPolicy`, so priority and
fair-share policies can replace first-come-first-served without touching the mechanism here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from switchyard.engine.block_manager import BlockManager
from switchyard.engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 512
    """Tokens (decode tokens + prefill chunk tokens) in one forward pass."""
    max_num_seqs: int = 256
    """Sequences running at once."""
    watermark: float = 0.01
    """Fraction of blocks kept free when admitting new work, so running decodes are not preempted at once."""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (each decode needs one token)")


class SchedulingPolicy(Protocol):
    """Decides the order of the waiting queue and which running sequence gives way when memory runs out."""

    def push(self, seq: Sequence) -> None: ...
    def push_front(self, seq: Sequence) -> None: ...
    def peek(self) -> Sequence | None: ...
    def pop(self) -> Sequence: ...
    def remove(self, seq: Sequence) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Sequence]: ...
    def pick_victim(self, running: list[Sequence]) -> Sequence | None: ...


class FCFSPolicy:
    """First come, first served; the most recently admitted running sequence is preempted first."""

    def __init__(self) -> None:
        self._queue: deque[Sequence] = deque()

    def push(self, seq: Sequence) -> None:
        self._queue.append(seq)

    def push_front(self, seq: Sequence) -> None:
        self._queue.appendleft(seq)

    def peek(self) -> Sequence | None:
        return self._queue[0] if self._queue else None

    def pop(self) -> Sequence:
        return self._queue.popleft()

    def remove(self, seq: Sequence) -> bool:
        try:
            self._queue.remove(seq)
        except ValueError:
            return False
        return True

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Sequence]:
        return iter(self._queue)

    def pick_victim(self, running: list[Sequence]) -> Sequence | None:
        return running[-1] if running else None


@dataclass
class SchedulerOutput:
    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)
    """(sequence, number of its tokens computed this step), running sequences first."""
    block_copies: list[tuple[int, int]] = field(default_factory=list)
    """Copy-on-write (source, destination) block copies to perform before the forward pass."""
    preempted: list[Sequence] = field(default_factory=list)
    num_batched_tokens: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, block_manager: BlockManager, policy: SchedulingPolicy | None = None
    ) -> None:
        self.config = config
        self.block_manager = block_manager
        self.waiting: SchedulingPolicy = policy or FCFSPolicy()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self._watermark_blocks = int(config.watermark * block_manager.num_blocks)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.push(seq)

    def add_running(self, seq: Sequence) -> None:
        """A sequence forked from a running one joins the running set directly."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take a finished or aborted sequence out of the queues and free its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self.block_manager.free(seq)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        copies_by_seq: dict[int, list[tuple[int, int]]] = {}
        budget = self.config.max_num_batched_tokens
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
            copies = self.block_manager.allocate_slots(seq, num_new)
            while copies is None:
                victim = self.waiting.pick_victim(self.running)
                assert victim is not None, "nothing to preempt although a sequence needs blocks"
                if self.running.index(victim) < index:
                    index -= 1
                budget += self._preempt(victim, out)
                copies_by_seq.pop(victim.seq_id, None)
                if victim is seq:
                    break
                copies = self.block_manager.allocate_slots(seq, num_new)
            if copies is None:
                continue  # seq itself gave way; the next one now stands at `index`
            copies_by_seq[seq.seq_id] = copies
            out.scheduled.append((seq, num_new))
            budget -= num_new
            index += 1
        if not out.preempted:
            budget = self._admit_waiting(budget, out, copies_by_seq)
        out.block_copies = [c for copies in copies_by_seq.values() for c in copies]
        out.num_batched_tokens = self.config.max_num_batched_tokens - budget
        return out

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> int:
        """Preempt seq by recompute; returns the budget it had been given this step (0 if none)."""
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.push_front(seq)
        self.num_preemptions += 1
        out.preempted.append(seq)
        refund = sum(n for s, n in out.scheduled if s is seq)
        out.scheduled = [(s, n) for s, n in out.scheduled if s is not seq]
        return refund

    def _seq_slots(self) -> int:
        # An unforked request will become n sequences after its prefill; reserve their slots now.
        return sum(1 if s.request.forked else s.request.params.n for s in self.running)

    def _admit_waiting(
        self, budget: int, out: SchedulerOutput, copies_by_seq: dict[int, list[tuple[int, int]]]
    ) -> int:
        if not len(self.waiting):
            return budget
        slots = self._seq_slots()
        while budget > 0:
            seq = self.waiting.peek()
            if seq is None:
                break
            needed_slots = 1 if seq.request.forked else seq.request.params.n
            if slots + needed_slots > self.config.max_num_seqs:
                break
            cached = self.block_manager.match_prefix(seq)
            num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
            needed = self.block_manager.blocks_needed(seq, num_new)
            enough = needed <= self.block_manager.num_free_blocks - self._watermark_blocks or not self.running
            copies = self.block_manager.allocate_slots(seq, num_new) if enough else None
            if copies is None:
                self.block_manager.free(seq)  # give the matched prefix back; it stays cached
                seq.num_computed_tokens = 0
                break
            if seq.num_output_tokens == 0:
                seq.request.num_cached_tokens = cached
            self.waiting.pop()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            copies_by_seq[seq.seq_id] = copies
            out.scheduled.append((seq, num_new))
            slots += needed_slots
            budget -= num_new
        return budget
