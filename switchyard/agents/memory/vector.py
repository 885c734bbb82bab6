"""Long-term memory: facts about a user, embedded and searched by meaning across all their sessions.

Facts come from the `remember` tool or from `extract_facts` (a chat model reads a conversation); each is embedded once (MiniLM) and stored in a
sqlite-vec table partitioned by user, so recall only ever scans one user's facts.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from switchyard.agents.chat_model import ChatFn, maybe_await, reply_text
from switchyard.agents.memory.session import Message, default_memory_path
from switchyard.agents.rag.embeddings import Embedder, to_blob
from switchyard.agents.sqlite_db import connect


@dataclass(frozen=True)
class MemoryFact:
    """One remembered fact and how close it is to the query (cosine similarity; 1.0 when not from a search)."""

    id: int
    user_id: str
    text: str
    session_id: str | None
    created_at: float
    score: float = 1.0


class VectorMemory:
    """Per-user facts with semantic recall, in the same SQLite file as sessions by default."""

    def __init__(self, embedder: Embedder, path: str | os.PathLike[str] | None = None) -> None:
        self.embedder = embedder
        self.path = Path(path) if path is not None else default_memory_path()
        self._conn = connect(self.path, vectors=True)
        self._conn.executescript(
            f"""
            CREATE TABLE IF NOT EXISTS memory_facts (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                user_id TEXT NOT NULL,
                session_id TEXT,
                text TEXT NOT NULL,
                created_at REAL NOT NULL,
                UNIQUE(user_id, text)
            );
            CREATE VIRTUAL TABLE IF NOT EXISTS memory_vectors USING vec0(
                user_id TEXT PARTITION KEY,
                embedding float[{embedder.dim}] distance_metric=cosine
            );
            """
        )

    def remember(self, user_id: str, text: str, session_id: str | None = None) -> MemoryFact:
        """Store a fact for `user_id` (an identical fact already stored is returned instead of duplicated)."""
        text = " ".join(text.split())
        if not text:
            raise ValueError("a fact must not be empty")
        existing = self._conn.execute(
            "SELECT id, session_id, created_at FROM memory_facts WHERE user_id = ? AND text = ?",
            (user_id, text),
        ).fetchone()
        if existing is not None:
            return MemoryFact(existing[0], user_id, text, existing[1], existing[2])
        vector = self.embedder.embed([text])[0]
        now = time.time()
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            cursor = self._conn.execute(
                "INSERT INTO memory_facts(user_id, session_id, text, created_at) VALUES (?, ?, ?, ?)",
                (user_id, session_id, text, now),
            )
            fact_id = int(cursor.lastrowid)
            self._conn.execute(
                "INSERT INTO memory_vectors(rowid, user_id, embedding) VALUES (?, ?, ?)",
                (fact_id, user_id, to_blob(vector)),
            )
        return MemoryFact(fact_id, user_id, text, session_id, now)

    def recall(self, user_id: str, query: str, k: int = 5, min_score: float = 0.0) -> list[MemoryFact]:
        """The `k` facts of `user_id` most similar to `query`, best first, at least `min_score` similar."""
        if k <= 0 or not query.strip():
            return []
        vector = self.embedder.embed([query])[0]
        rows = self._conn.execute(
            "SELECT v.rowid, v.distance, f.session_id, f.text, f.created_at FROM memory_vectors v "
            "JOIN memory_facts f ON f.id = v.rowid "
            "WHERE v.embedding MATCH ? AND v.k = ? AND v.user_id = ? ORDER BY v.distance",
            (to_blob(vector), k, user_id),
        ).fetchall()
        facts = [MemoryFact(r[0], user_id, r[3], r[2], r[4], score=1.0 - float(r[1])) for r in rows]
        return [fact for fact in facts if fact.score >= min_score]

    def facts(self, user_id: str) -> list[MemoryFact]:
        """Every fact stored for `user_id`, oldest first."""
        rows = self._conn.execute(
            "SELECT id, session_id, text, created_at FROM memory_facts WHERE user_id = ? ORDER BY id",
            (user_id,),
        ).fetchall()
        return [MemoryFact(r[0], user_id, r[2], r[1], r[3]) for r in rows]

    def forget(self, fact_id: int) -> None:
        """Delete one fact."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("DELETE FROM memory_facts WHERE id = ?", (fact_id,))
            self._conn.execute("DELETE FROM memory_vectors WHERE rowid = ?", (fact_id,))

    def forget_user(self, user_id: str) -> int:
        """Delete every fact of `user_id`; returns how many."""
        return delete_user_facts(self._conn, user_id)

    def close(self) -> None:
        self._conn.close()


def delete_user_facts(conn: sqlite3.Connection, user_id: str) -> int:
    """Delete every fact of `user_id` through an open connection (sqlite-vec loaded); returns how many."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_facts'").fetchone() is None:
        return 0
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        ids = [(r[0],) for r in conn.execute("SELECT id FROM memory_facts WHERE user_id = ?", (user_id,))]
        conn.executemany("DELETE FROM memory_vectors WHERE rowid = ?", ids)
        conn.execute("DELETE FROM memory_facts WHERE user_id = ?", (user_id,))
    return len(ids)


def make_remember_tool(
    memory: VectorMemory, user_id: str, session_id: str | None = None
) -> Callable[[str], str]:
    """A `remember(fact)` tool bound to one user, for the agent runtime to expose to the model."""

    def remember(fact: str) -> str:
        """Save a durable fact about the user (a preference, a name, a decision) to recall in later sessions.

        Args:
            fact: one self-contained sentence, e.g. "The user's favourite editor is Helix."
        """
        stored = memory.remember(user_id, fact, session_id=session_id)
        return f"Remembered: {stored.text}"

    return remember


async def extract_facts(
    chat: ChatFn,
    memory: VectorMemory,
    user_id: str,
    messages: Sequence[Message],
    session_id: str | None = None,
) -> list[MemoryFact]:
    """Ask a chat model for durable facts about the user in `messages` (one per line) and remember them."""
    transcript = "\n".join(f"{m.get('role')}: {m.get('content') or ''}" for m in messages)
    prompt = (
        "List durable facts about the user worth remembering in later conversations (preferences, names, "
        "plans, constraints), one short self-contained sentence per line. Write NONE if there are none.\n\n"
        + transcript
    )
    reply = reply_text(await maybe_await(chat([{"role": "user", "content": prompt}])))
    lines = [line.strip().lstrip("-*• ").strip() for line in reply.splitlines()]
    facts = [line for line in lines if line and line.upper() != "NONE"]
    return [memory.remember(user_id, fact, session_id=session_id) for fact in facts]
