"""Iteration-level (continuous) batching with chunked prefill under a token budget.

Each step first gives every running sequence its next tokens (one for a decode, a chunk for a prefill in
progress), then admits waiting sequences with what is left of the budget. A long prompt therefore delays the
running decodes by at most one chunk. When KV blocks run out, the policy's victim is preempted by recompute:
its blocks are freed and it goes back to the front of the waiting queue with its tokens so far.

Ordering decisions (who waits first, who is preempted) belong to a `SchedulingPolicy`, so priority and
fair-share policies can replace first-come-first-served without touching the mechanism here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from switchyard.engine.block_manager import BlockManager
from switchyard.engine.policy import FCFSPolicy, SchedulingPolicy
from switchyard.engine.sequence import Request, Sequence, SequenceStatus
from switchyard.errors import CapacityError


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 512
    """Tokens (decode tokens + prefill chunk tokens) in one forward pass."""
    max_num_seqs: int = 256
    """Sequences running at once."""
    watermark: float = 0.01
    """Fraction of blocks kept free when admitting new work, so running decodes are not preempted at once."""
    preempt_for_priority: bool = False
    """Let a waiting request that does not fit preempt strictly less urgent running sequences."""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (each decode needs one token)")


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
        self.waiting: SchedulingPolicy = policy if policy is not None else FCFSPolicy()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.preemptions_by_priority: Counter[int] = Counter()
        self.kv_full_decisions: Counter[str] = Counter()
        """How often a request met a full KV cache: 'queued' (waited), 'preempted' (took a less urgent
        sequence's place) or 'rejected' (refused at admission: `reject_if_full`)."""
        self._queued_for_kv: set[int] = set()
        self._watermark_blocks = int(config.watermark * block_manager.num_blocks)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def num_backlogged(self) -> int:
        """Waiting sequences that will not fit beside the running batch: what admission control counts.

        Requests that arrived during the current step wait only until the next one, when the batch has room
        for them (free sequence slots, free KV blocks for their prompts); counting them as a backlog would shed
        a burst while the batch sits empty. Walks the queue in scheduling order only as far as it fits, so the
        cost is bounded by max_num_seqs."""
        manager = self.block_manager
        slots = self.config.max_num_seqs - self._seq_slots()
        blocks = manager.num_free_blocks - self._watermark_blocks
        fitting = 0
        for seq in self.waiting:
            needed_slots = 1 if seq.request.forked else seq.request.params.n
            needed_blocks = manager.blocks_for_tokens(seq.num_tokens)
            if needed_slots > slots or needed_blocks > blocks:
                break
            slots -= needed_slots
            blocks -= needed_blocks
            fitting += 1
        return len(self.waiting) - fitting

    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.push(seq)

    def add_fork(self, parent: Sequence, child: Sequence) -> None:
        """A sequence forked from a running one shares its blocks and joins the running set directly."""
        self.block_manager.fork(parent, child)
        child.status = SequenceStatus.RUNNING
        self.running.append(child)

    def never_scheduled_since(self, arrived_before: float) -> list[Request]:
        """Waiting requests that arrived before the cutoff and were never scheduled (queue timeouts)."""
        expired = {
            seq.request.request_id: seq.request
            for seq in self.waiting
            if seq.request.timing.first_scheduled is None and seq.request.timing.arrival < arrived_before
        }
        return list(expired.values())

    def reject_if_full(self, num_prompt_tokens: int) -> None:
        """CapacityError when a prompt would not find free blocks behind the prompts already waiting (the
        'reject' KV-full policy, checked at admission)."""
        manager = self.block_manager
        queued = sum(manager.blocks_for_tokens(seq.num_tokens) for seq in self.waiting)
        if manager.blocks_for_tokens(num_prompt_tokens) + queued > manager.num_free_blocks:
            self.kv_full_decisions["rejected"] += 1
            raise CapacityError("the KV cache is full; retry later")

    def remove(self, seq: Sequence) -> None:
        """Take a finished or aborted sequence out of the queues and free its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
            self._queued_for_kv.discard(seq.seq_id)
        self.block_manager.free(seq)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        copies_by_seq: dict[int, list[tuple[int, int]]] = {}
        budget = self.config.max_num_batched_tokens
        self.running = self.waiting.order_running(self.running)
        level = self._isolated_priority()
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            if level is not None and seq.request.priority > level:
                index += 1  # paused for this step: it keeps its blocks
                continue
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
        # After preempting under memory pressure, admit only requests more urgent than what gave way, so the
        # freed blocks are not immediately taken by the sequences that were just preempted.
        admit_below = min((s.request.priority for s in out.preempted), default=None)
        if level is not None:
            admit_below = level + 1 if admit_below is None else min(admit_below, level + 1)
        budget = self._admit_waiting(budget, out, copies_by_seq, admit_below)
        for seq, num_new in out.scheduled:
            self.waiting.on_scheduled(seq, num_new)
        out.block_copies = [c for copies in copies_by_seq.values() for c in copies]
        out.num_batched_tokens = self.config.max_num_batched_tokens - budget
        return out

    def _isolated_priority(self) -> int | None:
        """With priority preemption on, a step that prefills an urgent request runs only that priority level
        (and more urgent ones): less urgent running sequences pause for the step, so an urgent prompt is not
        slowed by the decodes of the work it outranks. None when nothing needs isolating."""
        if not self.config.preempt_for_priority or not self.running:
            return None
        levels = [
            seq.request.priority for seq in self.running if seq.in_prefill or seq.num_computed_tokens == 0
        ]
        head = self.waiting.peek()
        if head is not None:
            levels.append(head.request.priority)
        if not levels:
            return None
        level = min(levels)
        if all(seq.request.priority <= level for seq in self.running):
            return None
        return level

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> int:
        """Preempt seq by recompute; returns the budget it had been given this step (0 if none)."""
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.push_front(seq)
        self.num_preemptions += 1
        self.preemptions_by_priority[seq.request.priority] += 1
        out.preempted.append(seq)
        refund = sum(n for s, n in out.scheduled if s is seq)
        out.scheduled = [(s, n) for s, n in out.scheduled if s is not seq]
        return refund

    def _seq_slots(self) -> int:
        # An unforked request will become n sequences after its prefill; reserve their slots now.
        return sum(1 if s.request.forked else s.request.params.n for s in self.running)

    def _admit_waiting(
        self,
        budget: int,
        out: SchedulerOutput,
        copies_by_seq: dict[int, list[tuple[int, int]]],
        admit_below: int | None,
    ) -> int:
        if not len(self.waiting):
            return budget
        slots = self._seq_slots()
        while budget > 0:
            seq = self.waiting.peek()
            if seq is None or (admit_below is not None and seq.request.priority >= admit_below):
                break
            needed_slots = 1 if seq.request.forked else seq.request.params.n
            if slots + needed_slots > self.config.max_num_seqs:
                if not self._preempt_for(seq, out, copies_by_seq):
                    break
                slots = self._seq_slots()
                continue
            cached = self.block_manager.match_prefix(seq)
            num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
            needed = self.block_manager.blocks_needed(seq, num_new)
            enough = needed <= self.block_manager.num_free_blocks - self._watermark_blocks or not self.running
            copies = self.block_manager.allocate_slots(seq, num_new) if enough else None
            if copies is None:
                self.block_manager.free(seq)  # give the matched prefix back; it stays cached
                seq.num_computed_tokens = 0
                if not self._preempt_for(seq, out, copies_by_seq):
                    if seq.seq_id not in self._queued_for_kv:
                        self._queued_for_kv.add(seq.seq_id)
                        self.kv_full_decisions["queued"] += 1
                    break
                self.kv_full_decisions["preempted"] += 1
                budget = self.config.max_num_batched_tokens - sum(n for _, n in out.scheduled)
                slots = self._seq_slots()
                continue
            if seq.num_output_tokens == 0:
                seq.request.num_cached_tokens = cached
            self.waiting.pop()
            self._queued_for_kv.discard(seq.seq_id)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            copies_by_seq[seq.seq_id] = copies
            out.scheduled.append((seq, num_new))
            slots += needed_slots
            budget -= num_new
        return budget

    def _preempt_for(
        self, seq: Sequence, out: SchedulerOutput, copies_by_seq: dict[int, list[tuple[int, int]]]
    ) -> bool:
        """Preempt one running sequence less urgent than waiting `seq`, if the policy allows; True if done."""
        if not self.config.preempt_for_priority:
            return False
        victim = self.waiting.pick_victim(self.running, for_seq=seq)
        if victim is None:
            return False
        self._preempt(victim, out)
        copies_by_seq.pop(victim.seq_id, None)
        return True
