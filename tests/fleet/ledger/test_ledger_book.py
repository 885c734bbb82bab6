"""A tenant's timeline in memory: which credit a spend takes, late events, balances at past times."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_model import QUERY_TIMES, TENANTS, LedgerModel, ledger_events

from switchyard.fleet.ledger.book import TenantBook
from switchyard.fleet.ledger.credit_state import CreditState, after_grant, after_spend
from switchyard.fleet.ledger.errors import InvalidLedgerEventError
from switchyard.fleet.ledger.events import Grant, LedgerEvent, Settle, Spend


def test_a_spend_takes_the_credit_that_expires_first() -> None:
    state = after_grant(CreditState(), Grant("late", "t", 10, at=0, expires_at=100))
    state = after_grant(state, Grant("soon", "t", 10, at=1, expires_at=50))
    state = after_spend(state, at=2, amount=12)
    assert [(lot.grant_id, lot.remaining) for lot in state.lots] == [("late", 8)]
    assert state.balance(60) == 8  # the grant that lapses at 50 was used up, so nothing was lost to expiry


def test_expired_credit_lapses_and_an_uncovered_spend_is_debt_the_next_grant_pays() -> None:
    state = after_grant(CreditState(), Grant("g", "t", 10, at=0, expires_at=5))
    assert state.balance(4.9) == 10 and state.balance(5) == 0
    state = after_spend(state, at=5, amount=3)  # the grant expired at 5: nothing covers this
    assert state.debt == 3 and state.balance(5) == -3
    state = after_grant(state, Grant("h", "t", 10, at=6))
    assert state.debt == 0 and state.balance(6) == 7


def test_a_late_spend_is_placed_in_the_past_and_corrects_the_balances_after_it() -> None:
    book = TenantBook()
    book.add(Grant("soon", "t", 10, at=0, expires_at=10))
    book.add(Grant("never", "t", 10, at=0))
    book.add(Spend("now", "t", 5, at=20))
    assert book.balance_at(9) == 20 and book.balance_at(20) == 5
    book.add(Spend("late", "t", 8, at=5))  # arrives last, happened at 5: takes from the grant lapsing at 10
    assert book.balance_at(4) == 20
    assert book.balance_at(5) == 12
    assert book.balance_at(20) == 5  # the soon-lapsing grant would have lapsed anyway
    book.add(Spend("later", "t", 7, at=6))  # takes the 2 left of "soon", then 5 of "never"
    assert book.balance_at(20) == 0


def test_a_settlement_amends_its_spend_where_the_spend_sits_even_before_the_spend_arrives() -> None:
    book = TenantBook()
    book.add(Grant("g", "t", 100, at=0))
    book.settle(Settle("s/settle", "t", "s", 30, at=50))
    assert book.balance_at(60) == 100
    book.add(Spend("s", "t", 80, at=10))
    assert book.balance_at(9) == 100 and book.balance_at(10) == 70
    history = book.history(math.inf)
    assert [
        (entry.event.event_id, entry.amount, entry.settled, entry.balance_after) for entry in history
    ] == [
        ("g", 100, False, 100),
        ("s", 30, True, 70),
    ]


def test_events_at_one_instant_order_grants_first_then_by_id() -> None:
    book = TenantBook()
    book.add(Spend("s", "t", 5, at=3))
    book.add(Grant("g", "t", 5, at=3, expires_at=4))
    assert book.balance_at(3) == 0  # the grant came first, so the spend took it (no debt)
    assert book.balance_at(4) == 0


def test_history_stops_at_the_time_asked() -> None:
    book = TenantBook()
    for at in (1.0, 2.0, 3.0):
        book.add(Grant(f"g{at}", "t", 1, at=at))
    assert [entry.event.at for entry in book.history(2.0)] == [1.0, 2.0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: Grant("g", "t", 0, at=0),
        lambda: Grant("g", "t", 5, at=3, expires_at=3),
        lambda: Spend("s", "t", -1, at=0),
        lambda: Spend("", "t", 1, at=0),
        lambda: Spend("s", "t", 1, at=math.nan),
        lambda: Settle("x", "t", "", 1, at=0),
    ],
)
def test_impossible_events_are_refused(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidLedgerEventError):
        make()


def _assert_matches(books: dict[str, TenantBook], model: LedgerModel) -> None:
    for tenant in TENANTS:
        book = books[tenant]
        for at in QUERY_TIMES:
            assert book.balance_at(at) == model.balance(tenant, at), (tenant, at)


@settings(max_examples=150, deadline=None)
@given(
    events=ledger_events(max_events=40),
    data=st.data(),
    checkpoint_every=st.integers(1, 5),
)
def test_any_arrival_order_gives_the_models_balances_after_every_arrival(
    events: list[LedgerEvent], data: st.DataObject, checkpoint_every: int
) -> None:
    arrival = data.draw(st.permutations(events), label="arrival order")
    books = {tenant: TenantBook(checkpoint_every) for tenant in TENANTS}
    model = LedgerModel()
    for event in arrival:
        if isinstance(event, Settle):
            books[event.tenant].settle(event)
        else:
            books[event.tenant].add(event)
        model.add(event)
        _assert_matches(books, model)
    for tenant in TENANTS:  # the balance after each event in the history is the balance at its time
        for entry in books[tenant].history(math.inf):
            later = [e for e in books[tenant].history(math.inf) if e.event.at == entry.event.at]
            assert later[-1].balance_after == model.balance(tenant, entry.event.at)
