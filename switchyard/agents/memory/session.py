"""Conversation sessions: each session id's message history, persisted so a conversation survives restarts.

`Session` is the small protocol the runner uses (load before a run, append after each turn, undo, clear);
`SQLiteSession` is the default backend, one WAL-mode file shared by processes. A Postgres backend only needs
the same five methods. The running summary that context budgeting writes is kept beside the history.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from switchyard.agents.sqlite_db import connect
from switchyard.home import switchyard_home

Message = dict[str, Any]
"""One OpenAI chat message (`role`, `content`, optional `tool_calls` / `tool_call_id` / `name`)."""


@dataclass(frozen=True)
class RunningSummary:
    """A summary of a session's oldest messages: `covered` = how many leading non-system messages it replaces."""

    text: str
    covered: int


@runtime_checkable
class Session(Protocol):
    """A conversation's persistent history (shape of the OpenAI Agents SDK's session protocol)."""

    session_id: str

    async def get_items(self, limit: int | None = None) -> list[Message]:
        """All messages in order, or only the newest `limit`."""
        ...

    async def add_items(self, items: Sequence[Message]) -> None:
        """Append messages at the end."""
        ...

    async def pop_item(self) -> Message | None:
        """Remove and return the newest message (None when empty), e.g. to retry a turn."""
        ...

    async def clear_session(self) -> None:
        """Forget every message and the running summary."""
        ...

    async def get_summary(self) -> RunningSummary | None: ...

    async def set_summary(self, summary: RunningSummary) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    user_id TEXT,
    created_at REAL NOT NULL,
    summary TEXT,
    summary_covered INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS session_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    message TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS session_items_by_session ON session_items(session_id, id);
CREATE INDEX IF NOT EXISTS sessions_by_user ON sessions(user_id);
"""


def default_memory_path() -> Path:
    """Where sessions, vector memory and profiles live unless told otherwise: `$SWITCHYARD_HOME/memory.db`."""
    return switchyard_home() / "memory.db"


class SQLiteSession:
    """A session stored in SQLite (WAL), safe to open from several processes at once.

    `user_id` ties the session to a user so that `forget_user` can delete it.
    """

    def __init__(
        self, session_id: str, path: str | os.PathLike[str] | None = None, user_id: str | None = None
    ) -> None:
        if not session_id:
            raise ValueError("session_id must be a non-empty string")
        self.session_id = session_id
        self.path = Path(path) if path is not None else default_memory_path()
        self._conn = connect(self.path)
        self._conn.executescript(_SCHEMA)
        self._conn.execute(
            "INSERT OR IGNORE INTO sessions(session_id, user_id, created_at) VALUES (?, ?, ?)",
            (session_id, user_id, time.time()),
        )
        if user_id is not None:
            self._conn.execute(
                "UPDATE sessions SET user_id = ? WHERE session_id = ? AND user_id IS NULL",
                (user_id, session_id),
            )

    async def get_items(self, limit: int | None = None) -> list[Message]:
        if limit is None:
            rows = self._conn.execute(
                "SELECT message FROM session_items WHERE session_id = ? ORDER BY id", (self.session_id,)
            ).fetchall()
        else:
            rows = self._conn.execute(
                "SELECT message FROM (SELECT id, message FROM session_items WHERE session_id = ? "
                "ORDER BY id DESC LIMIT ?) ORDER BY id",
                (self.session_id, limit),
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    async def add_items(self, items: Sequence[Message]) -> None:
        now = time.time()
        rows = [(self.session_id, json.dumps(item, ensure_ascii=False), now) for item in items]
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany(
                "INSERT INTO session_items(session_id, message, created_at) VALUES (?, ?, ?)", rows
            )

    async def pop_item(self) -> Message | None:
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            row = self._conn.execute(
                "SELECT id, message FROM session_items WHERE session_id = ? ORDER BY id DESC LIMIT 1",
                (self.session_id,),
            ).fetchone()
            if row is None:
                return None
            self._conn.execute("DELETE FROM session_items WHERE id = ?", (row[0],))
        return json.loads(row[1])

    async def clear_session(self) -> None:
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("DELETE FROM session_items WHERE session_id = ?", (self.session_id,))
            self._conn.execute(
                "UPDATE sessions SET summary = NULL, summary_covered = 0 WHERE session_id = ?",
                (self.session_id,),
            )

    async def get_summary(self) -> RunningSummary | None:
        row = self._conn.execute(
            "SELECT summary, summary_covered FROM sessions WHERE session_id = ?", (self.session_id,)
        ).fetchone()
        if row is None or row[0] is None:
            return None
        return RunningSummary(text=row[0], covered=int(row[1]))

    async def set_summary(self, summary: RunningSummary) -> None:
        self._conn.execute(
            "UPDATE sessions SET summary = ?, summary_covered = ? WHERE session_id = ?",
            (summary.text, summary.covered, self.session_id),
        )

    def close(self) -> None:
        self._conn.close()


def delete_user_sessions(user_id: str, path: str | os.PathLike[str] | None = None) -> int:
    """Delete every session (history and summary) belonging to `user_id`; returns how many were deleted."""
    conn = connect(Path(path) if path is not None else default_memory_path())
    try:
        conn.executescript(_SCHEMA)
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            ids = [
                r[0] for r in conn.execute("SELECT session_id FROM sessions WHERE user_id = ?", (user_id,))
            ]
            conn.executemany("DELETE FROM session_items WHERE session_id = ?", [(i,) for i in ids])
            conn.execute("DELETE FROM sessions WHERE user_id = ?", (user_id,))
        return len(ids)
    finally:
        conn.close()
