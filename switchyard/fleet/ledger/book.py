"""One tenant's timeline: its events in time order, and its credit after any prefix of them.

Events may arrive in any order. A late one is inserted where its time puts it, and the checkpoints after that
place are dropped, so the balances after it are recomputed (lazily, on the next query) from the checkpoint
before it. A checkpoint is kept every `CHECKPOINT_EVERY` events, so a query replays at most that many.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from switchyard.fleet.ledger.credit_state import CreditState, after_grant, after_spend
from switchyard.fleet.ledger.events import Grant, OrderKey, Settle, Spend, TimelineEvent

CHECKPOINT_EVERY = 32


@dataclass(frozen=True)
class HistoryEntry:
    """One event of a tenant's timeline and its balance just after it."""

    event: TimelineEvent
    amount: int
    """The amount that counts: a settled spend's final cost, else the event's own amount."""
    settled: bool
    """For a spend: whether a settlement fixed its amount (else it is still held at its reservation)."""
    balance_after: int


class TenantBook:
    def __init__(self, checkpoint_every: int = CHECKPOINT_EVERY) -> None:
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be at least 1")
        self._every = checkpoint_every
        self._keys: list[OrderKey] = []
        self._events: list[TimelineEvent] = []
        self._spends: dict[str, Spend] = {}
        self._settled: dict[str, int] = {}
        self._checkpoints: list[CreditState] = [CreditState()]
        """`_checkpoints[j]`: the state after the first `j * checkpoint_every` events."""

    def __len__(self) -> int:
        return len(self._events)

    def add(self, event: TimelineEvent) -> None:
        """Place a grant or spend in the timeline (the log guarantees each event id comes once)."""
        position = bisect.bisect_left(self._keys, event.order_key)
        self._keys.insert(position, event.order_key)
        self._events.insert(position, event)
        if isinstance(event, Spend):
            self._spends[event.event_id] = event
        self._forget_after(position)

    def settle(self, settlement: Settle) -> None:
        """Fix a spend's amount; a settlement that comes before its spend waits for it."""
        self._settled[settlement.spend_id] = settlement.amount
        spend = self._spends.get(settlement.spend_id)
        if spend is not None:
            self._forget_after(bisect.bisect_left(self._keys, spend.order_key))

    def balance_at(self, at: float) -> int:
        """The balance at time `at`: every event up to and including `at` applied, lots expired by then lapsed."""
        return self._state_after(self._count_until(at)).balance(at)

    def history(self, until: float) -> list[HistoryEntry]:
        """The events up to `until`, in time order, each with the balance just after it."""
        state = CreditState()
        entries = []
        for event in self._events[: self._count_until(until)]:
            state = self._step(state, event)
            entries.append(
                HistoryEntry(
                    event=event,
                    amount=self._amount(event),
                    settled=event.event_id in self._settled,
                    balance_after=state.balance(event.at),
                )
            )
        return entries

    def _count_until(self, at: float) -> int:
        return bisect.bisect_right(self._keys, (at, 2, ""))  # past every kind's key at `at`

    def _forget_after(self, position: int) -> None:
        """Drop the checkpoints that include the event at `position` (those after it are no longer true)."""
        del self._checkpoints[position // self._every + 1 :]

    def _state_after(self, count: int) -> CreditState:
        """The state after the first `count` events, from the last checkpoint before them (adding checkpoints)."""
        start = min(count // self._every, len(self._checkpoints) - 1)
        state = self._checkpoints[start]
        for index in range(start * self._every, count):
            state = self._step(state, self._events[index])
            done = index + 1
            if done % self._every == 0 and done // self._every == len(self._checkpoints):
                self._checkpoints.append(state)
        return state

    def _step(self, state: CreditState, event: TimelineEvent) -> CreditState:
        if isinstance(event, Grant):
            return after_grant(state, event)
        return after_spend(state, event.at, self._amount(event))

    def _amount(self, event: TimelineEvent) -> int:
        if isinstance(event, Spend):
            return self._settled.get(event.event_id, event.amount)
        return event.amount
