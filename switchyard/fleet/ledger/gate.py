"""The gateway's credit check: reserve a request's worst-case cost before it runs, settle it to what it used.

    reservation = await gate.reserve(tenant, model, prompt_tokens, max_tokens)   # or InsufficientQuotaError
    try:
        ...forward the request, count what it uses...
    finally:
        await gate.settle(reservation, TokenUsage(prompt_tokens, cached_tokens, output_tokens))

A reservation is a spend of `prompt_tokens` input plus `max_tokens` output at the model's price, logged only
if the tenant's balance covers it, so concurrent requests cannot overspend between them. Settling amends that
spend to the real cost (a stream cut off after 7 tokens costs 7 tokens' output); it stays at the reservation's
time. A reservation never settled (the gateway died mid-request) keeps its full amount: the ledger cannot know
what the replica did, and the reservation is what the tenant was admitted for.

Both calls are coroutines: the blocking SQLite commit (an fsync) runs in a worker thread, not on the event
loop. Once `settle` is called, the settlement completes even if the awaiting task is then cancelled (a client
that disconnects): it is shielded, and the thread runs to the end. A `reserve` whose caller is cancelled
releases what it held. `reserve_blocking` and `settle_blocking`
are the same on the calling thread.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from switchyard.fleet.errors import InsufficientQuotaError
from switchyard.fleet.ledger.errors import InsufficientCreditError
from switchyard.fleet.ledger.events import Settle, Spend
from switchyard.fleet.ledger.ledger import Ledger
from switchyard.fleet.prices import PriceTable, credits_text
from switchyard.fleet.usage import TokenUsage


@dataclass(frozen=True)
class Reservation:
    """Credit held for one admitted request until it is settled."""

    reservation_id: str
    """The id of the spend event that holds the credit."""
    tenant: str
    model: str
    amount: int
    """Micro-credits held: the prompt and max_tokens at the model's price."""
    at: float
    prompt_tokens: int
    max_tokens: int


@dataclass(frozen=True)
class Settlement:
    reservation: Reservation
    usage: TokenUsage
    amount: int
    """Micro-credits charged for `usage` (above the reservation when usage outgrew it)."""

    @property
    def refunded(self) -> int:
        """Micro-credits given back: the reservation less the charge (negative when usage outgrew it)."""
        return self.reservation.amount - self.amount


class CreditGate:
    def __init__(
        self,
        ledger: Ledger,
        prices: PriceTable,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.prices = prices
        self._clock = clock

    async def reserve(self, tenant: str, model: str, prompt_tokens: int, max_tokens: int) -> Reservation:
        """Hold the request's worst-case cost; InsufficientQuotaError (429) when the balance does not cover it,
        UnpricedModelError when the model has no price."""
        held = asyncio.ensure_future(
            asyncio.to_thread(self.reserve_blocking, tenant, model, prompt_tokens, max_tokens)
        )
        try:
            return await asyncio.shield(held)
        except asyncio.CancelledError:
            held.add_done_callback(self._release_unclaimed)
            raise

    async def settle(self, reservation: Reservation, usage: TokenUsage) -> Settlement:
        """Charge what the request used instead of the reservation; settling again with the same usage is a
        no-op (LedgerConflictError with another usage)."""
        # Shielded: a client that disconnects cancels the task awaiting this, and the charge must still land.
        return await asyncio.shield(asyncio.to_thread(self.settle_blocking, reservation, usage))

    def reserve_blocking(self, tenant: str, model: str, prompt_tokens: int, max_tokens: int) -> Reservation:
        """`reserve` on the calling thread (it waits for the disk)."""
        price = self.prices.price(model)
        amount = price.cost_micros(TokenUsage(prompt_tokens=prompt_tokens, output_tokens=max_tokens))
        reservation = Reservation(
            reservation_id=f"rsv-{uuid.uuid4().hex}",
            tenant=tenant,
            model=model,
            amount=amount,
            at=self._clock(),
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
        )
        spend = Spend(
            event_id=reservation.reservation_id,
            tenant=tenant,
            amount=amount,
            at=reservation.at,
            note=f"{model}: reserved {prompt_tokens} prompt + {max_tokens} max tokens",
        )
        try:
            self.ledger.spend_if_covered(spend)
        except InsufficientCreditError as exc:
            raise InsufficientQuotaError(tenant, credits_text(amount), credits_text(exc.available)) from exc
        return reservation

    def settle_blocking(self, reservation: Reservation, usage: TokenUsage) -> Settlement:
        """`settle` on the calling thread (it waits for the disk)."""
        amount = self.prices.price(reservation.model).cost_micros(usage)
        settlement = Settle(
            event_id=f"{reservation.reservation_id}/settle",
            tenant=reservation.tenant,
            spend_id=reservation.reservation_id,
            amount=amount,
            at=self._clock(),
            note=(
                f"{reservation.model}: {usage.prompt_tokens} prompt ({usage.cached_tokens} cached) + "
                f"{usage.output_tokens} completion tokens"
            ),
        )
        self.ledger.record(settlement)
        return Settlement(reservation=reservation, usage=usage, amount=amount)

    def _release_unclaimed(self, held: asyncio.Future[Reservation]) -> None:
        """Settle to nothing a reservation whose requester was cancelled before it got it (else it stays held)."""
        if held.cancelled() or held.exception() is not None:
            return
        asyncio.get_running_loop().run_in_executor(None, self.settle_blocking, held.result(), TokenUsage())

    def balance(self, tenant: str) -> int:
        """The tenant's balance now, in micro-credits (reservations not yet settled count at their amount)."""
        return self.ledger.balance(tenant, self._clock())
