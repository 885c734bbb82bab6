"""The ledger's durable, append-only event log: one SQLite table, WAL mode, `synchronous=FULL`.

An event is committed (fsynced) before anyone applies it, so an acknowledged event survives kill -9 and a
power cut. Rows are never updated or deleted; `seq` numbers them in commit order, which lets every process
that shares the file (gateways, `switchyard credits`) read what the others appended since it last looked.
Appending an event id that is already there is a no-op, so a writer that crashed before it knew whether its
append landed simply sends the event again.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from switchyard.fleet.ledger.errors import LedgerConflictError, LedgerStoreError
from switchyard.fleet.ledger.events import Grant, LedgerEvent, Settle, Spend

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('grant', 'spend', 'settle')),
    tenant TEXT NOT NULL,
    amount INTEGER NOT NULL CHECK (amount >= 0),
    at REAL NOT NULL,
    expires_at REAL,
    spend_id TEXT,
    note TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS ledger_one_settlement_per_spend
    ON ledger_events (spend_id) WHERE kind = 'settle';
"""
_COLUMNS = "seq, event_id, kind, tenant, amount, at, expires_at, spend_id, note"
_BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another process's write transaction before it gives up."""


class EventLog:
    """The log file; not thread-safe on its own (the Ledger serialises its calls)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(path), timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise LedgerStoreError(f"{path}: cannot open the ledger: {exc}") from exc

    def close(self) -> None:
        self._conn.close()

    def append(self, event: LedgerEvent) -> bool:
        """Commit `event` (unless inside `write_lock`, whose end commits it); False when it was already there.

        LedgerConflictError when its id is taken by a different event, or its spend is settled already to
        another amount, or names a logged event that is not a spend of its tenant."""
        if isinstance(event, Settle):
            spend = self.get(event.spend_id)
            if spend is not None and not (isinstance(spend, Spend) and spend.tenant == event.tenant):
                raise LedgerConflictError(
                    f"settlement {event.event_id!r} names {spend!r}, not a spend of its tenant"
                )
        cursor = self._execute(
            "INSERT INTO ledger_events (event_id, kind, tenant, amount, at, expires_at, spend_id, note) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            _row(event),
        )
        if cursor.rowcount == 1:
            return True
        existing = self._find(event)
        if not _same(existing, event):
            raise LedgerConflictError(
                f"event {event.event_id!r} conflicts with the logged {existing!r}; a retry must resend the "
                "same event, and a new event needs a new id"
            )
        return False

    def read_since(self, seq: int) -> list[tuple[int, LedgerEvent]]:
        """The events committed after `seq`, in commit order, with their sequence numbers."""
        rows = self._execute(
            f"SELECT {_COLUMNS} FROM ledger_events WHERE seq > ? ORDER BY seq", (seq,)
        ).fetchall()
        return [(row[0], _event(row)) for row in rows]

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """A write transaction no other process can interleave with (BEGIN IMMEDIATE): read, decide, append,
        and commit at the end (rolled back if the block raises)."""
        self._execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._execute("COMMIT")

    def get(self, event_id: str) -> LedgerEvent | None:
        """The logged event with this id, if any."""
        row = self._execute(
            f"SELECT {_COLUMNS} FROM ledger_events WHERE event_id = ?", (event_id,)
        ).fetchone()
        return None if row is None else _event(row)

    def _find(self, event: LedgerEvent) -> LedgerEvent | None:
        """The logged event `event` collided with: the same id, or a settlement of the same spend."""
        found = self.get(event.event_id)
        if found is not None or not isinstance(event, Settle):
            return found
        row = self._execute(
            f"SELECT {_COLUMNS} FROM ledger_events WHERE kind = 'settle' AND spend_id = ?", (event.spend_id,)
        ).fetchone()
        return None if row is None else _event(row)

    def _execute(self, sql: str, parameters: tuple[object, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise LedgerStoreError(f"{self.path}: {exc}") from exc


def _same(existing: LedgerEvent | None, event: LedgerEvent) -> bool:
    """Whether a re-sent event is the logged one: equal, or for a settlement, the same spend settled to the
    same amount (when and with what note it was re-sent does not matter)."""
    if isinstance(existing, Settle) and isinstance(event, Settle):
        return (existing.tenant, existing.spend_id, existing.amount) == (
            event.tenant,
            event.spend_id,
            event.amount,
        )
    return existing == event


def _row(event: LedgerEvent) -> tuple[object, ...]:
    expires_at = spend_id = None
    if isinstance(event, Grant):
        kind = "grant"
        expires_at = None if math.isinf(event.expires_at) else event.expires_at
    elif isinstance(event, Spend):
        kind = "spend"
    else:
        kind = "settle"
        spend_id = event.spend_id
    return (event.event_id, kind, event.tenant, event.amount, event.at, expires_at, spend_id, event.note)


def _event(row: tuple[Any, ...]) -> LedgerEvent:
    _, event_id, kind, tenant, amount, at, expires_at, spend_id, note = row
    try:
        if kind == "grant":
            expiry = math.inf if expires_at is None else float(expires_at)
            return Grant(event_id, tenant, int(amount), float(at), expiry, note)
        if kind == "spend":
            return Spend(event_id, tenant, int(amount), float(at), note)
        return Settle(event_id, tenant, spend_id, int(amount), float(at), note)
    except (TypeError, ValueError) as exc:  # InvalidLedgerEventError is a ValueError
        raise LedgerStoreError(f"the ledger holds an unreadable event {event_id!r}: {exc}") from exc
