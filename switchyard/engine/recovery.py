"""Recovery after a hung step: fresh scheduling state, and every unfinished request queued again.

The hung step may still be running on its thread and holds the old block manager, KV cache and queues, so
fresh ones replace them (the engine's epoch tells the old step to discard its results if it ever returns).
Every unfinished request is queued again with its tokens so far: waiting ones resume their wait, running
ones are recomputed from prompt + generated tokens, and their streams continue where they were, without
repeats. A request that was in more than `max_hangs` hung steps is failed instead, so one poisonous request
cannot hang the engine over and over.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from switchyard.config import EngineConfig
from switchyard.engine.builder import EngineParts, SchedulingState, build_scheduling_state
from switchyard.engine.policy import SchedulingPolicy
from switchyard.engine.sequence import Request, SequenceStatus


@dataclass
class Recovery:
    state: SchedulingState
    """The fresh state, its scheduler holding every request that goes on."""
    failed: list[tuple[Request, str]]
    """Requests in too many hung steps, and why they fail: the engine fails them."""


def recover_after_hang(
    config: EngineConfig,
    parts: EngineParts,
    policy: SchedulingPolicy,
    requests: Iterable[Request],
    awaiting_grammar: Collection[str],
    blamed: Collection[str],
    max_hangs: int,
) -> Recovery:
    """Rebuild the scheduling state with an empty copy of `policy` and queue `requests` again, in arrival
    order; those in `blamed` (the hung step's) count one more hang. Requests whose grammar is still compiling
    (`awaiting_grammar`) were never scheduled: nothing of them was in the hung step."""
    state = build_scheduling_state(config, parts, policy.clone_empty())
    failed = []
    for request in sorted(requests, key=lambda r: r.timing.arrival):
        if request.request_id in awaiting_grammar:
            continue
        for seq in request.sequences:
            seq.take_drafts()  # the hung step's unverified proposals are not output
            seq.block_table, seq.prefix_node, seq.num_cached_blocks = [], None, 0
            seq.num_computed_tokens = 0
            if not seq.is_finished:
                seq.status = SequenceStatus.WAITING
        if request.request_id in blamed:
            request.num_hangs += 1
        if request.num_hangs > max_hangs:
            failed.append((request, f"the request was in {request.num_hangs} engine steps that hung; failed"))
            continue
        for seq in request.sequences:
            if not seq.is_finished:
                state.scheduler.add(seq)
    return Recovery(state, failed)
