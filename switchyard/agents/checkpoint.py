"""Checkpoints in SQLite (WAL): every completed step is committed before the next begins.

A run killed at any point (kill -9 included) resumes from its last committed state. Tool calls with side
effects are bracketed in the `effects` table by their idempotency key: a call recorded as done is never run
again, one that started but never recorded its end is retried only if its tool says it is idempotent, and one
recorded as timed out is never run again (it may have taken effect, and a sync tool's thread may still be
running it).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from switchyard.agents.state import RunState

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, state TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, step INTEGER NOT NULL, kind TEXT NOT NULL,
    payload TEXT NOT NULL, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps (run_id, id);
CREATE TABLE IF NOT EXISTS effects (
    key TEXT PRIMARY KEY, run_id TEXT NOT NULL, tool TEXT NOT NULL, status TEXT NOT NULL, result TEXT
);
"""


class RunNotFoundError(KeyError):
    """No checkpoint has this run id."""


@dataclass(frozen=True)
class StepRecord:
    step: int
    kind: str
    payload: str


@dataclass(frozen=True)
class Effect:
    status: str
    """"started", "done" or "timed_out"."""
    result: str | None


class CheckpointStore:
    """One SQLite file of run states, their step log and tool-effect records."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def save(self, state: RunState, kind: str, payload: str) -> None:
        """Append one step to the log and store the state after it, atomically."""
        now = time.time()
        with self._transaction():
            self._db.execute(
                "INSERT INTO steps (run_id, step, kind, payload, at) VALUES (?, ?, ?, ?, ?)",
                (state.run_id, state.step, kind, payload, now),
            )
            self._db.execute(
                "INSERT INTO runs (run_id, state, updated) VALUES (?, ?, ?) "
                "ON CONFLICT(run_id) DO UPDATE SET state = excluded.state, updated = excluded.updated",
                (state.run_id, state.to_json(), now),
            )

    def load(self, run_id: str) -> RunState:
        row = self._db.execute("SELECT state FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return RunState.from_json(row[0])

    def steps(self, run_id: str) -> list[StepRecord]:
        rows = self._db.execute(
            "SELECT step, kind, payload FROM steps WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall()
        return [StepRecord(*row) for row in rows]

    def run_ids(self) -> list[str]:
        return [row[0] for row in self._db.execute("SELECT run_id FROM runs ORDER BY updated")]

    def run_updates(self) -> dict[str, float]:
        """Each run's last checkpoint time (unix seconds), oldest first."""
        return dict(self._db.execute("SELECT run_id, updated FROM runs ORDER BY updated").fetchall())

    def effect(self, key: str) -> Effect | None:
        row = self._db.execute("SELECT status, result FROM effects WHERE key = ?", (key,)).fetchone()
        return Effect(*row) if row else None

    def effect_started(self, key: str, run_id: str, tool: str) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO effects (key, run_id, tool, status, result) VALUES (?, ?, ?, 'started', NULL)",
                (key, run_id, tool),
            )

    def effect_done(self, key: str, result: str) -> None:
        with self._transaction():
            self._db.execute("UPDATE effects SET status = 'done', result = ? WHERE key = ?", (result, key))

    def effect_timed_out(self, key: str) -> None:
        """The call was abandoned while running: whether it took effect is unknown, and it stays unknown (a
        result that comes later is discarded, never recorded)."""
        with self._transaction():
            self._db.execute("UPDATE effects SET status = 'timed_out' WHERE key = ?", (key,))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
