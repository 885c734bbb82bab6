"""A brute-force model of the credits ledger, and the events the property and crash tests feed both.

The model keeps credit as single micro-credit units, each with its grant's expiry, and replays every query
from nothing: a spend removes units one at a time, the first to expire first, and counts a unit of debt when
none is left; a grant pays debt off unit by unit before it adds units. It shares no code with the ledger, so
the two agree only if the ledger's lots, checkpoints and late-event corrections are right.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from hypothesis import strategies as st

from switchyard.fleet.ledger.events import Grant, LedgerEvent, Settle, Spend

TENANTS = ("acme", "globex")
QUERY_TIMES = tuple(t / 2 for t in range(-2, 50))
"""Every whole and half second across the strategies' times, expiries included."""


class LedgerModel:
    def __init__(self, events: Iterable[LedgerEvent] = ()) -> None:
        self.timeline: dict[str, Grant | Spend] = {}
        self.settled: dict[str, int] = {}
        for event in events:
            self.add(event)

    def add(self, event: LedgerEvent) -> None:
        if isinstance(event, Settle):
            self.settled[event.spend_id] = event.amount
        else:
            self.timeline[event.event_id] = event

    def balance(self, tenant: str, at: float) -> int:
        def rank(event: Grant | Spend) -> tuple[float, int, str]:
            return (event.at, 0 if isinstance(event, Grant) else 1, event.event_id)

        units: list[float] = []  # each unit's expiry
        debt = 0
        mine = [e for e in self.timeline.values() if e.tenant == tenant and e.at <= at]
        for event in sorted(mine, key=rank):
            if isinstance(event, Grant):
                for _ in range(event.amount):
                    if debt:
                        debt -= 1
                    else:
                        units.append(event.expires_at)
                continue
            for _ in range(self.settled.get(event.event_id, event.amount)):
                live = [expiry for expiry in units if expiry > event.at]
                if live:
                    units.remove(min(live))
                else:
                    debt += 1
        return sum(1 for expiry in units if expiry > at) - debt


@st.composite
def ledger_events(draw: st.DrawFn, max_events: int = 24) -> list[LedgerEvent]:
    """Grants, spends and settlements of some of the spends, for two tenants, in time order of creation."""
    count = draw(st.integers(1, max_events))
    events: list[LedgerEvent] = []
    for index in range(count):
        tenant = draw(st.sampled_from(TENANTS))
        at = float(draw(st.integers(0, 20)))
        if draw(st.booleans()):
            lifetime = draw(st.one_of(st.just(math.inf), st.integers(1, 15).map(float)))
            events.append(Grant(f"g{index}", tenant, draw(st.integers(1, 20)), at, at + lifetime))
            continue
        spend = Spend(f"s{index}", tenant, draw(st.integers(0, 20)), at)
        events.append(spend)
        if draw(st.booleans()):
            events.append(
                Settle(f"s{index}/settle", tenant, spend.event_id, draw(st.integers(0, 25)), at + 1)
            )
    return events


def scripted_events(seed: int, count: int) -> list[LedgerEvent]:
    """`count` events from a seed, in a shuffled arrival order (for the subprocess crash tests)."""
    rng = random.Random(seed)
    events: list[LedgerEvent] = []
    spends: list[Spend] = []
    while len(events) < count:
        tenant = rng.choice(TENANTS)
        at = float(rng.randint(0, 20))
        roll = rng.random()
        if roll < 0.4:
            lifetime = math.inf if rng.random() < 0.3 else float(rng.randint(1, 15))
            events.append(Grant(f"g{len(events)}", tenant, rng.randint(1, 20), at, at + lifetime))
        elif roll < 0.8 or not spends:
            spend = Spend(f"s{len(events)}", tenant, rng.randint(0, 20), at)
            spends.append(spend)
            events.append(spend)
        else:
            spend = spends.pop(rng.randrange(len(spends)))
            events.append(
                Settle(f"{spend.event_id}/settle", spend.tenant, spend.event_id, rng.randint(0, 25), 21.0)
            )
    rng.shuffle(events)
    return events
