"""Scheduling policies: who waits first, who gets the step's token budget first, who gives way.

`FCFSPolicy` is first come, first served. `PriorityFairPolicy` orders by priority (lower value = more urgent),
then shares each priority level between tenants by weighted fair queuing on tokens served: the tenant with the
least weighted service goes next. The scheduler owns the mechanism (blocks, budget, preemption by recompute);
a policy only orders sequences.

Failure mode of the fair-share policy (watch per-tenant tokens/s and queue time): fairness is over tokens
scheduled, not over wall time, so a tenant whose requests are mostly long prompts can be held back while a
decode-heavy tenant's many short steps add up; and a tenant that goes idle does not bank credit (its service
is lifted to the least active tenant's when it returns), so bursty light tenants get no catch-up.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator
from typing import Protocol

from switchyard.engine.sequence import Sequence


class SchedulingPolicy(Protocol):
    """The ordering decisions of the scheduler."""

    def push(self, seq: Sequence) -> None:
        """Queue a new sequence."""

    def push_front(self, seq: Sequence) -> None:
        """Queue a preempted sequence ahead of those that arrived after it."""

    def peek(self) -> Sequence | None: ...
    def pop(self) -> Sequence: ...
    def remove(self, seq: Sequence) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Sequence]: ...

    def order_running(self, running: list[Sequence]) -> list[Sequence]:
        """The order in which running sequences get the step's token budget."""

    def pick_victim(self, running: list[Sequence], for_seq: Sequence | None = None) -> Sequence | None:
        """The running sequence to preempt. With for_seq (a waiting sequence that cannot be admitted), only
        one strictly less urgent than it, or None."""

    def on_scheduled(self, seq: Sequence, num_tokens: int) -> None:
        """num_tokens of seq are computed this step (service accounting)."""

    def clone_empty(self) -> SchedulingPolicy:
        """A policy with the same settings and accounting but empty queues (for rebuilding after a hang)."""


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

    def order_running(self, running: list[Sequence]) -> list[Sequence]:
        return running

    def pick_victim(self, running: list[Sequence], for_seq: Sequence | None = None) -> Sequence | None:
        if for_seq is not None:
            return None  # no request outranks another
        return running[-1] if running else None

    def on_scheduled(self, seq: Sequence, num_tokens: int) -> None:
        pass

    def clone_empty(self) -> FCFSPolicy:
        return FCFSPolicy()


DEFAULT_TENANT = ""


class PriorityFairPolicy:
    """Priority first; within a priority level, weighted fair queuing between tenants on tokens served."""

    def __init__(self, weights: dict[str, float] | None = None, default_weight: float = 1.0) -> None:
        for tenant, weight in (weights or {}).items():
            if weight <= 0:
                raise ValueError(f"tenant {tenant!r} has weight {weight}; weights must be > 0")
        if default_weight <= 0:
            raise ValueError("default_weight must be > 0")
        self.weights = dict(weights or {})
        self.default_weight = default_weight
        self.service: dict[str, float] = defaultdict(float)
        """Tokens served to each tenant divided by its weight."""
        self.tokens_served: dict[str, int] = defaultdict(int)
        self._levels: dict[int, dict[str, deque[Sequence]]] = {}
        self._size = 0

    @staticmethod
    def tenant_of(seq: Sequence) -> str:
        return seq.request.tenant or DEFAULT_TENANT

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, self.default_weight)

    def _queue_of(self, seq: Sequence) -> deque[Sequence]:
        level = self._levels.setdefault(seq.request.priority, {})
        tenant = self.tenant_of(seq)
        queue = level.get(tenant)
        if queue is None:
            queue = level[tenant] = deque()
        return queue

    def push(self, seq: Sequence) -> None:
        tenant = self.tenant_of(seq)
        if not self._has_waiting(tenant):
            # A returning tenant starts level with the least-served active tenant: no banked credit.
            active = [self.service[t] for t in self._waiting_tenants() if t != tenant]
            if active:
                self.service[tenant] = max(self.service[tenant], min(active))
        self._queue_of(seq).append(seq)
        self._size += 1

    def push_front(self, seq: Sequence) -> None:
        self._queue_of(seq).appendleft(seq)
        self._size += 1

    def _has_waiting(self, tenant: str) -> bool:
        return any(level.get(tenant) for level in self._levels.values())

    def _waiting_tenants(self) -> set[str]:
        return {t for level in self._levels.values() for t, q in level.items() if q}

    def _head_queue(self) -> deque[Sequence] | None:
        for priority in sorted(self._levels):
            level = self._levels[priority]
            queues = [(self.service[t], q[0].request.timing.arrival, t) for t, q in level.items() if q]
            if queues:
                return level[min(queues)[2]]
        return None

    def peek(self) -> Sequence | None:
        queue = self._head_queue()
        return queue[0] if queue else None

    def pop(self) -> Sequence:
        queue = self._head_queue()
        if queue is None:
            raise IndexError("pop from an empty policy queue")
        self._size -= 1
        return queue.popleft()

    def remove(self, seq: Sequence) -> bool:
        queue = self._levels.get(seq.request.priority, {}).get(self.tenant_of(seq))
        if not queue:
            return False
        try:
            queue.remove(seq)
        except ValueError:
            return False
        self._size -= 1
        return True

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Sequence]:
        for priority in sorted(self._levels):
            for queue in self._levels[priority].values():
                yield from queue

    def _urgency_key(self, seq: Sequence) -> tuple[int, float]:
        return (seq.request.priority, self.service[self.tenant_of(seq)])

    def order_running(self, running: list[Sequence]) -> list[Sequence]:
        if len(self.service) <= 1 and len(self._levels) <= 1:
            return running  # one tenant, one priority seen so far: admission order is the order
        # Stable: within equal keys, earlier-admitted sequences keep their place.
        return sorted(running, key=self._urgency_key)

    def pick_victim(self, running: list[Sequence], for_seq: Sequence | None = None) -> Sequence | None:
        if not running:
            return None
        # Least urgent, then most-served tenant, then most recently admitted.
        index = max(range(len(running)), key=lambda i: (*self._urgency_key(running[i]), i))
        victim = running[index]
        if for_seq is not None and victim.request.priority <= for_seq.request.priority:
            return None
        return victim

    def clone_empty(self) -> PriorityFairPolicy:
        clone = PriorityFairPolicy(self.weights, self.default_weight)
        clone.service.update(self.service)
        clone.tokens_served.update(self.tokens_served)
        return clone

    def on_scheduled(self, seq: Sequence, num_tokens: int) -> None:
        tenant = self.tenant_of(seq)
        self.service[tenant] += num_tokens / self.weight(tenant)
        self.tokens_served[tenant] += num_tokens
