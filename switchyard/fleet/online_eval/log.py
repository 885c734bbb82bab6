"""The online-eval log: a SQLite file of logged exchanges, the feedback on them and judges' verdicts.

One connection, used from one thread at a time (the writer's, or a CLI's); the gateway never writes on the
request path (writer.py).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from switchyard.fleet.online_eval.record import LoggedExchange
from switchyard.fleet.usage import TokenUsage

_SCHEMA = """
CREATE TABLE IF NOT EXISTS exchanges (
    request_id TEXT NOT NULL, shadow INTEGER NOT NULL, tenant TEXT NOT NULL, pool TEXT NOT NULL,
    endpoint TEXT NOT NULL, request TEXT NOT NULL, response TEXT NOT NULL, status INTEGER NOT NULL,
    latency REAL NOT NULL, prompt_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, cost REAL NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (request_id, shadow)
);
CREATE TABLE IF NOT EXISTS feedback (
    request_id TEXT NOT NULL, tenant TEXT NOT NULL, rating REAL, correction TEXT, comment TEXT,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS verdicts (
    request_id TEXT NOT NULL, shadow INTEGER NOT NULL, judge TEXT NOT NULL, passed INTEGER NOT NULL,
    score REAL NOT NULL, rationale TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (request_id, shadow, judge)
);
CREATE INDEX IF NOT EXISTS exchanges_created ON exchanges (created);
"""


@dataclass(frozen=True)
class Feedback:
    """A rating in [-1, 1] (-1 bad, 0 neutral, 1 good), a corrected answer, a comment: any may be absent."""

    request_id: str
    tenant: str
    rating: float | None
    correction: str | None
    comment: str | None
    created: float


@dataclass(frozen=True)
class StoredVerdict:
    """A judge's grade of one logged answer (`judge`: the judge model's name)."""

    request_id: str
    shadow: bool
    judge: str
    passed: bool
    score: float
    """In [0, 1]."""
    rationale: str
    created: float


class OnlineEvalLog:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def add(self, exchanges: list[LoggedExchange]) -> None:
        rows = [
            (
                e.request_id, int(e.shadow), e.tenant, e.pool, e.endpoint, e.request, e.response, e.status,
                e.latency, e.usage.prompt_tokens, e.usage.cached_tokens, e.usage.output_tokens, e.cost,
                e.created,
            )
            for e in exchanges
        ]  # fmt: skip
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO exchanges VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )

    def owner(self, request_id: str) -> tuple[str, str] | None:
        """The tenant and pool of a logged request, or None when the request was not logged."""
        with self._lock:
            row = self._db.execute(
                "SELECT tenant, pool FROM exchanges WHERE request_id = ? AND shadow = 0", (request_id,)
            ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def verdict_counts(self) -> list[tuple[str, bool, str, int, int]]:
        """(pool, shadow, judge, verdicts, passes) over the whole log."""
        with self._lock:
            rows = self._db.execute(
                "SELECT e.pool, v.shadow, v.judge, COUNT(*), SUM(v.passed) FROM verdicts v JOIN exchanges e "
                "ON e.request_id = v.request_id AND e.shadow = v.shadow GROUP BY e.pool, v.shadow, v.judge"
            ).fetchall()
        return [(str(p), bool(s), str(j), int(n), int(k or 0)) for p, s, j, n, k in rows]

    def add_feedback(self, feedback: Feedback) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO feedback VALUES (?, ?, ?, ?, ?, ?)",
                (
                    feedback.request_id, feedback.tenant, feedback.rating, feedback.correction,
                    feedback.comment, feedback.created,
                ),
            )  # fmt: skip

    def feedback(self, request_id: str) -> list[Feedback]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM feedback WHERE request_id = ? ORDER BY created", (request_id,)
            ).fetchall()
        return [Feedback(*row) for row in rows]

    def add_verdict(self, verdict: StoredVerdict) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    verdict.request_id, int(verdict.shadow), verdict.judge, int(verdict.passed), verdict.score,
                    verdict.rationale, verdict.created,
                ),
            )  # fmt: skip

    def verdicts(self, judge: str | None = None) -> list[StoredVerdict]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM verdicts WHERE ? IS NULL OR judge = ? ORDER BY created", (judge, judge)
            ).fetchall()
        return [StoredVerdict(r[0], bool(r[1]), r[2], bool(r[3]), r[4], r[5], r[6]) for r in rows]

    def exchanges(self, since: float | None = None) -> Iterator[LoggedExchange]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM exchanges WHERE created >= ? ORDER BY created", (since or 0.0,)
            ).fetchall()
        for row in rows:
            (rid, shadow, tenant, pool, endpoint, request, response, status, latency, p, c, o, cost, ts) = row
            yield LoggedExchange(
                rid, tenant, pool, endpoint, request, response, status, latency, TokenUsage(p, c, o), cost, ts,
                bool(shadow),
            )  # fmt: skip
