"""The credits ledger as the gateway's admission hooks: reserve before a request goes to a replica, settle
to what it used when it ends (answered, cut off, or abandoned by its client)."""

from __future__ import annotations

from switchyard.fleet.admission_hooks import HookRequest
from switchyard.fleet.ledger.gate import CreditGate, Reservation
from switchyard.fleet.usage import TokenUsage

RESERVED_OUTPUT_WHEN_UNSET = 4096
"""Output tokens reserved for a request that sets no max_tokens: the gateway does not know each replica's
context length, so it holds a bound that covers common ones; settlement charges what was generated."""


class CreditHooks:
    def __init__(self, gate: CreditGate) -> None:
        self.gate = gate

    async def before(self, request: HookRequest) -> Reservation:
        """Hold the request's worst case; InsufficientQuotaError (429 insufficient_quota) when it is not covered."""
        max_tokens = request.max_tokens if request.max_tokens is not None else RESERVED_OUTPUT_WHEN_UNSET
        return await self.gate.reserve(request.tenant, request.model, request.prompt_tokens, max_tokens)

    async def after(self, token: Reservation, usage: TokenUsage) -> None:
        await self.gate.settle(token, usage)

    def close(self) -> None:
        self.gate.ledger.close()
