"""The credits ledger: the durable event log, and each tenant's book replayed from it.

Writing is append-then-apply: `record` commits the event to the log, and only then do the books take it in,
by reading the log from where they last stopped (`_catch_up`). The books are therefore always a replay of a
prefix of the log: a crash after the append loses nothing (a restart replays the whole log), and nothing is
applied twice (each logged event is read once, and a re-sent event id is not logged again). Reading the log
before every answer also brings in what other processes sharing the file (the `switchyard credits` command,
other gateways) appended. Thread-safe: one lock serialises the log and the books.
"""

from __future__ import annotations

import threading
from pathlib import Path

from switchyard.fleet.ledger.book import HistoryEntry, TenantBook
from switchyard.fleet.ledger.errors import InsufficientCreditError
from switchyard.fleet.ledger.event_log import EventLog
from switchyard.fleet.ledger.events import LedgerEvent, Settle, Spend


class Ledger:
    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._books: dict[str, TenantBook] = {}
        self._read_through = 0
        """The last log sequence number the books have taken in."""
        self._lock = threading.Lock()
        with self._lock:
            self._catch_up()

    @classmethod
    def open(cls, path: Path) -> Ledger:
        """The ledger stored at `path` (created if new), with every logged event replayed."""
        return cls(EventLog(path))

    @property
    def path(self) -> Path:
        return self._log.path

    def close(self) -> None:
        with self._lock:
            self._log.close()

    def record(self, event: LedgerEvent) -> bool:
        """Log `event`, then apply it; False when the log already had it (it is then not applied again)."""
        with self._lock:
            appended = self._log.append(event)
            self._catch_up()
            return appended

    def spend_if_covered(self, spend: Spend) -> int:
        """Log and apply `spend` only if the tenant's balance at its time covers it, atomically against every
        writer of the file; the balance it was checked against. InsufficientCreditError when it is not."""
        with self._lock:
            with self._log.write_lock():
                self._catch_up()
                available = self._balance(spend.tenant, spend.at)
                if available < spend.amount:
                    raise InsufficientCreditError(spend.tenant, spend.amount, available)
                self._log.append(spend)
            self._catch_up()
            return available

    def event(self, event_id: str) -> LedgerEvent | None:
        """The logged event with this id, if any (a writer's check before it re-sends)."""
        with self._lock:
            return self._log.get(event_id)

    def balance(self, tenant: str, at: float) -> int:
        """The tenant's balance at time `at`, in micro-credits, by what the log holds now."""
        with self._lock:
            self._catch_up()
            return self._balance(tenant, at)

    def history(self, tenant: str, until: float) -> list[HistoryEntry]:
        """The tenant's grants and spends up to `until`, in time order, with the balance after each."""
        with self._lock:
            self._catch_up()
            book = self._books.get(tenant)
            return [] if book is None else book.history(until)

    def tenants(self) -> list[str]:
        """Every tenant the log names, sorted."""
        with self._lock:
            self._catch_up()
            return sorted(self._books)

    def _balance(self, tenant: str, at: float) -> int:
        book = self._books.get(tenant)
        return 0 if book is None else book.balance_at(at)

    def _catch_up(self) -> None:
        """Apply the events logged since the books last looked, in log order (which need not be time order)."""
        for seq, event in self._log.read_since(self._read_through):
            book = self._books.setdefault(event.tenant, TenantBook())
            if isinstance(event, Settle):
                book.settle(event)
            else:
                book.add(event)
            self._read_through = seq
