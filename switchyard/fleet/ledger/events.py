"""What the credits ledger records: grants, spends, and the settlements that amend spends.

An event carries the time it takes effect (`at`, seconds since the epoch), which need not be the time it
arrives: an operator's back-dated grant, or a spend from a gateway that was cut off for a while, is placed
where its time puts it. Amounts are integer micro-credits (`prices.MICROS_PER_CREDIT`), so sums are exact.
Every event has an id chosen by its writer, which makes a retried write harmless: the log keeps one copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from switchyard.fleet.ledger.errors import InvalidLedgerEventError

OrderKey = tuple[float, int, str]
"""Where an event sits in a tenant's timeline: its time, grants before spends at one instant, then its id.
The key depends on the event alone, so any arrival order replays to the same balances."""


@dataclass(frozen=True)
class Grant:
    """Credit for a tenant, usable from `at` until just before `expires_at`, when what is left of it lapses."""

    event_id: str
    tenant: str
    amount: int
    at: float
    expires_at: float = math.inf
    note: str = ""

    def __post_init__(self) -> None:
        _check_common(self.event_id, self.tenant, self.amount, self.at)
        if self.amount == 0:
            raise InvalidLedgerEventError(f"grant {self.event_id!r}: the amount must be positive")
        if not self.expires_at > self.at:
            raise InvalidLedgerEventError(f"grant {self.event_id!r}: it must expire after it is granted")

    @property
    def order_key(self) -> OrderKey:
        return (self.at, 0, self.event_id)


@dataclass(frozen=True)
class Spend:
    """Credit a tenant used at `at`, taken from its unexpired grants, the earliest to expire first.

    A reservation is a spend of its upper bound; a later `Settle` replaces the amount with the real cost."""

    event_id: str
    tenant: str
    amount: int
    at: float
    note: str = ""

    def __post_init__(self) -> None:
        _check_common(self.event_id, self.tenant, self.amount, self.at)

    @property
    def order_key(self) -> OrderKey:
        return (self.at, 1, self.event_id)


@dataclass(frozen=True)
class Settle:
    """The final amount of spend `spend_id`. It amends that spend where the spend sits in the timeline (the
    credit was held from then), so the balances after the spend are corrected, not the ones after `at`."""

    event_id: str
    tenant: str
    spend_id: str
    amount: int
    at: float
    note: str = ""

    def __post_init__(self) -> None:
        _check_common(self.event_id, self.tenant, self.amount, self.at)
        if not self.spend_id:
            raise InvalidLedgerEventError(f"settlement {self.event_id!r} names no spend")


LedgerEvent = Grant | Spend | Settle
TimelineEvent = Grant | Spend
"""The events that take a place in the timeline (a settlement amends one of them)."""


def _check_common(event_id: str, tenant: str, amount: int, at: float) -> None:
    if not event_id or not tenant:
        raise InvalidLedgerEventError("a ledger event needs an event id and a tenant")
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
        raise InvalidLedgerEventError(
            f"event {event_id!r}: the amount must be a non-negative integer of micro-credits"
        )
    if not math.isfinite(at):
        raise InvalidLedgerEventError(f"event {event_id!r}: its time must be finite")
