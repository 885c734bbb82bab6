"""A tenant's credit at one point of its timeline, and the rule by which a grant or a spend changes it.

The credit is a set of lots, one per grant with something left, ordered by expiry, plus a debt: the part of
spends no lot covered (a settlement above its reservation, or a late event that took credit a later spend
had counted on). A spend takes from the lot that expires first; a grant first pays off the debt. States are
immutable, so a tenant's book can keep them as checkpoints.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from switchyard.fleet.ledger.events import Grant


@dataclass(frozen=True)
class CreditLot:
    """What is left of one grant."""

    grant_id: str
    expires_at: float
    remaining: int


@dataclass(frozen=True)
class CreditState:
    lots: tuple[CreditLot, ...] = ()
    """Lots with credit left, the first to expire first (grant order among equal expiries)."""
    debt: int = 0

    def balance(self, at: float) -> int:
        """Unexpired credit at `at` less the debt, in micro-credits (negative while in debt)."""
        return sum(lot.remaining for lot in self.lots if lot.expires_at > at) - self.debt


def after_grant(state: CreditState, grant: Grant) -> CreditState:
    """The state once `grant` is given: it pays off the debt first, the rest becomes a lot."""
    lots = _unexpired(state.lots, grant.at)
    repaid = min(state.debt, grant.amount)
    left = grant.amount - repaid
    if left:
        position = bisect.bisect_right([lot.expires_at for lot in lots], grant.expires_at)
        lots = (*lots[:position], CreditLot(grant.event_id, grant.expires_at, left), *lots[position:])
    return CreditState(lots=lots, debt=state.debt - repaid)


def after_spend(state: CreditState, at: float, amount: int) -> CreditState:
    """The state once `amount` is spent at `at`: taken from the lots that expire first; what they lack is debt."""
    wanted = amount
    lots = []
    for lot in _unexpired(state.lots, at):
        taken = min(wanted, lot.remaining)
        wanted -= taken
        if taken < lot.remaining:
            lots.append(replace(lot, remaining=lot.remaining - taken) if taken else lot)
    return CreditState(lots=tuple(lots), debt=state.debt + wanted)


def _unexpired(lots: tuple[CreditLot, ...], at: float) -> tuple[CreditLot, ...]:
    return tuple(lot for lot in lots if lot.expires_at > at)
