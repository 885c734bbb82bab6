"""CreditGate: a request is admitted only if its reservation is covered, and settled to what it used."""

from __future__ import annotations

import asyncio
import math
from decimal import Decimal
from pathlib import Path

import pytest

from switchyard.fleet.errors import InsufficientQuotaError, UnpricedModelError, describe
from switchyard.fleet.ledger.errors import LedgerConflictError
from switchyard.fleet.ledger.events import Grant
from switchyard.fleet.ledger.gate import CreditGate, Reservation
from switchyard.fleet.ledger.ledger import Ledger
from switchyard.fleet.prices import ModelPrice, PriceTable
from switchyard.fleet.usage import TokenUsage

PRICES = PriceTable(
    {"chat": ModelPrice(input=Decimal("2"), output=Decimal("6"), cached_input=Decimal("0.5"))}
)
"""Credits per 1M tokens, so 1 token of input costs 2 micro-credits, of output 6, of cached input 0.5."""


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gate(tmp_path: Path, clock: FakeClock) -> CreditGate:
    ledger = Ledger.open(tmp_path / "ledger.db")
    ledger.record(Grant("g", "acme", 12_000, at=0))
    return CreditGate(ledger, PRICES, clock=clock)


def test_a_reservation_holds_the_prompt_and_max_tokens_and_settles_to_the_usage(gate: CreditGate) -> None:
    reservation = asyncio.run(gate.reserve("acme", "chat", prompt_tokens=1000, max_tokens=500))
    assert reservation.amount == 1000 * 2 + 500 * 6 == 5000
    assert reservation.at == 1000.0
    assert gate.balance("acme") == 7000
    usage = TokenUsage(prompt_tokens=1000, output_tokens=120, cached_tokens=400)
    settlement = asyncio.run(gate.settle(reservation, usage))
    assert settlement.amount == 600 * 2 + 400 * 0.5 + 120 * 6 == 2120
    assert settlement.refunded == 5000 - 2120
    assert gate.balance("acme") == 12_000 - 2120
    (_, spend) = gate.ledger.history("acme", math.inf)
    assert (spend.event.event_id, spend.amount, spend.settled) == (reservation.reservation_id, 2120, True)


def test_out_of_credit_is_refused_with_openais_insufficient_quota_and_nothing_is_held(
    gate: CreditGate,
) -> None:
    with pytest.raises(InsufficientQuotaError) as refused:
        gate.reserve_blocking("acme", "chat", prompt_tokens=1000, max_tokens=2000)  # 14000 > 12000
    assert gate.balance("acme") == 12_000
    assert len(gate.ledger.history("acme", math.inf)) == 1
    info = describe(refused.value)
    assert (info.status, info.type, info.code) == (429, "insufficient_quota", "insufficient_quota")
    assert info.headers == {"x-should-retry": "false"}
    assert "0.014" in info.message and "0.012" in info.message  # needed and available, in credits
    with pytest.raises(InsufficientQuotaError):
        gate.reserve_blocking("nobody", "chat", prompt_tokens=1, max_tokens=1)


def test_reservations_in_flight_count_against_the_balance_until_settled(gate: CreditGate) -> None:
    async def scenario() -> None:
        first = await gate.reserve("acme", "chat", prompt_tokens=0, max_tokens=1500)  # 9000
        with pytest.raises(InsufficientQuotaError):
            await gate.reserve("acme", "chat", prompt_tokens=0, max_tokens=1500)
        await gate.settle(first, TokenUsage(output_tokens=100))  # 600
        second = await gate.reserve("acme", "chat", prompt_tokens=0, max_tokens=1500)
        assert gate.balance("acme") == 12_000 - 600 - 9000
        await gate.settle(second, TokenUsage(output_tokens=1500))

    asyncio.run(scenario())
    assert gate.balance("acme") == 12_000 - 600 - 9000


def test_concurrent_reservations_never_overspend(gate: CreditGate) -> None:
    async def scenario() -> list[Reservation | BaseException]:
        attempts = [gate.reserve("acme", "chat", prompt_tokens=0, max_tokens=1000) for _ in range(5)]
        return await asyncio.gather(*attempts, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    admitted = [o for o in outcomes if isinstance(o, Reservation)]
    assert len(admitted) == 2  # 6000 each out of 12000
    assert all(isinstance(o, InsufficientQuotaError) for o in outcomes if not isinstance(o, Reservation))
    assert gate.balance("acme") == 0


def test_a_stream_cut_off_by_the_client_is_settled_to_what_was_generated(gate: CreditGate) -> None:
    generated = 0

    async def request(started: asyncio.Event) -> None:
        nonlocal generated
        reservation = await gate.reserve("acme", "chat", prompt_tokens=200, max_tokens=1000)
        try:
            for _ in range(1000):
                generated += 1
                if generated == 7:
                    started.set()
                await asyncio.sleep(0)  # a token goes out; the client may go away here
        finally:
            await gate.settle(reservation, TokenUsage(prompt_tokens=200, output_tokens=generated))

    async def scenario() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(request(started))
        await started.wait()
        task.cancel()  # the client disconnects mid-stream
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert 7 <= generated < 1000
    assert gate.balance("acme") == 12_000 - (200 * 2 + generated * 6)


def test_a_settlement_whose_caller_is_cancelled_still_lands(gate: CreditGate) -> None:
    reservation = gate.reserve_blocking("acme", "chat", prompt_tokens=10, max_tokens=100)

    async def scenario() -> None:
        task = asyncio.create_task(gate.settle(reservation, TokenUsage(prompt_tokens=10, output_tokens=3)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the shielded settlement finishes on its own; wait for the loop's worker threads to drain
        await asyncio.get_running_loop().shutdown_default_executor()

    asyncio.run(scenario())
    assert gate.balance("acme") == 12_000 - (10 * 2 + 3 * 6)


def test_a_reservation_whose_caller_is_cancelled_is_released(gate: CreditGate) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(gate.reserve("acme", "chat", prompt_tokens=0, max_tokens=1000))
        await asyncio.sleep(0)  # the reservation is under way in its thread
        task.cancel()  # the client went away while it was admitted
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(500):  # the release runs in a worker thread once the reservation lands
            entries = gate.ledger.history("acme", math.inf)
            if len(entries) == 2 and entries[1].settled:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the reservation was never released: {entries}")

    asyncio.run(scenario())
    assert gate.balance("acme") == 12_000


def test_settling_twice_is_harmless_and_settling_differently_is_refused(
    gate: CreditGate, clock: FakeClock
) -> None:
    reservation = gate.reserve_blocking("acme", "chat", prompt_tokens=10, max_tokens=100)
    gate.settle_blocking(reservation, TokenUsage(prompt_tokens=10, output_tokens=5))
    clock.now += 30  # a retry, later
    gate.settle_blocking(reservation, TokenUsage(prompt_tokens=10, output_tokens=5))
    assert gate.balance("acme") == 12_000 - (10 * 2 + 5 * 6)
    with pytest.raises(LedgerConflictError):
        gate.settle_blocking(reservation, TokenUsage(prompt_tokens=10, output_tokens=6))


def test_usage_beyond_the_reservation_is_charged_and_leaves_debt(gate: CreditGate) -> None:
    reservation = gate.reserve_blocking("acme", "chat", prompt_tokens=1000, max_tokens=1000)  # 8000
    settlement = gate.settle_blocking(reservation, TokenUsage(prompt_tokens=3000, output_tokens=1000))
    assert settlement.amount == 12_000 and settlement.refunded == -4000
    assert gate.balance("acme") == 0
    with pytest.raises(InsufficientQuotaError):
        gate.reserve_blocking("acme", "chat", prompt_tokens=1, max_tokens=0)


def test_the_held_credit_and_its_settlement_survive_a_gateway_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "ledger.db"
    first = CreditGate(Ledger.open(path), PRICES, clock=clock)
    first.ledger.record(Grant("g", "acme", 10_000, at=0))
    reservation = first.reserve_blocking("acme", "chat", prompt_tokens=100, max_tokens=1000)  # 6200
    first.ledger.close()

    restarted = CreditGate(Ledger.open(path), PRICES, clock=clock)
    assert restarted.balance("acme") == 10_000 - 6200  # unsettled: held at the reservation
    restarted.settle_blocking(reservation, TokenUsage(prompt_tokens=100, output_tokens=50))
    assert restarted.balance("acme") == 10_000 - (100 * 2 + 50 * 6)


def test_expired_credit_does_not_admit(tmp_path: Path, clock: FakeClock) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db")
    ledger.record(Grant("trial", "acme", 10_000, at=0, expires_at=2000))
    gate = CreditGate(ledger, PRICES, clock=clock)
    gate.reserve_blocking("acme", "chat", prompt_tokens=0, max_tokens=100)
    clock.now = 2000.0
    with pytest.raises(InsufficientQuotaError):
        gate.reserve_blocking("acme", "chat", prompt_tokens=0, max_tokens=100)


def test_a_model_without_a_price_is_refused(gate: CreditGate) -> None:
    with pytest.raises(UnpricedModelError) as refused:
        gate.reserve_blocking("acme", "code", prompt_tokens=1, max_tokens=1)
    info = describe(refused.value)
    assert (info.status, info.code, info.param) == (400, "model_not_priced", "model")
