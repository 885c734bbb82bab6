"""User profiles: key-value facts about a user (name, language, timezone) that persist across sessions,
and `forget_user`, which deletes everything Switchyard remembers about a user (right to be forgotten)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from switchyard.agents.memory.session import default_memory_path, delete_user_sessions
from switchyard.agents.memory.vector import delete_user_facts
from switchyard.agents.sqlite_db import connect


class UserProfile:
    """One user's key-value profile in SQLite (same file as sessions by default)."""

    def __init__(self, user_id: str, path: str | os.PathLike[str] | None = None) -> None:
        if not user_id:
            raise ValueError("user_id must be a non-empty string")
        self.user_id = user_id
        self.path = Path(path) if path is not None else default_memory_path()
        self._conn = connect(self.path)
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS user_profiles (user_id TEXT NOT NULL, key TEXT NOT NULL, "
            "value TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY(user_id, key))"
        )

    def set(self, key: str, value: str) -> None:
        """Set (or overwrite) one profile entry."""
        if not key:
            raise ValueError("profile key must be a non-empty string")
        self._conn.execute(
            "INSERT INTO user_profiles(user_id, key, value, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(user_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            (self.user_id, key, value, time.time()),
        )

    def get(self, key: str) -> str | None:
        row = self._conn.execute(
            "SELECT value FROM user_profiles WHERE user_id = ? AND key = ?", (self.user_id, key)
        ).fetchone()
        return None if row is None else str(row[0])

    def delete(self, key: str) -> None:
        self._conn.execute("DELETE FROM user_profiles WHERE user_id = ? AND key = ?", (self.user_id, key))

    def items(self) -> dict[str, str]:
        """The whole profile, keys in alphabetical order."""
        rows = self._conn.execute(
            "SELECT key, value FROM user_profiles WHERE user_id = ? ORDER BY key", (self.user_id,)
        ).fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def as_system_text(self) -> str:
        """The profile as lines for a system message ("" when empty)."""
        entries = self.items()
        if not entries:
            return ""
        return "Known facts about the user:\n" + "\n".join(f"- {k}: {v}" for k, v in entries.items())

    def clear(self) -> int:
        """Delete the whole profile; returns how many entries were deleted."""
        cursor = self._conn.execute("DELETE FROM user_profiles WHERE user_id = ?", (self.user_id,))
        return int(cursor.rowcount)

    def close(self) -> None:
        self._conn.close()


def forget_user(user_id: str, path: str | os.PathLike[str] | None = None) -> dict[str, int]:
    """Delete the user's profile, vector-memory facts and sessions; returns counts per kind."""
    db_path = Path(path) if path is not None else default_memory_path()
    profile = UserProfile(user_id, db_path)
    try:
        profile_entries = profile.clear()
    finally:
        profile.close()
    conn = connect(db_path, vectors=True)
    try:
        facts = delete_user_facts(conn, user_id)
    finally:
        conn.close()
    sessions = delete_user_sessions(user_id, db_path)
    return {"profile_entries": profile_entries, "facts": facts, "sessions": sessions}
