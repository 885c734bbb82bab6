"""The credits ledger's typed errors (the gateway turns a lack of credit into its own 429, not these)."""

from __future__ import annotations

from switchyard.errors import SwitchyardError


class LedgerError(SwitchyardError):
    """Base of the ledger's errors."""


class InvalidLedgerEventError(LedgerError, ValueError):
    """An event that can never be recorded: a negative amount, an expiry before the grant, an empty id."""


class LedgerConflictError(LedgerError):
    """An event id already in the log names a different event, or a spend is settled twice to different
    amounts: a retry must resend the same event, so a mismatch is a bug or a reused id, never a retry."""


class LedgerStoreError(LedgerError):
    """The ledger's database cannot be opened or read (a bad path, a corrupt or foreign file)."""


class InsufficientCreditError(LedgerError):
    """A spend that must be covered is not: the tenant's balance at the spend's time is below its amount."""

    def __init__(self, tenant: str, needed: int, available: int) -> None:
        self.tenant = tenant
        self.needed = needed
        self.available = available
        super().__init__(f"tenant `{tenant}` has {available} micro-credits; the spend needs {needed}")
