"""Sessions: round trip, undo, summaries, and persistence across processes (SQLite WAL)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from switchyard.agents.memory.session import RunningSummary, Session, SQLiteSession


def test_session_round_trip_pop_and_clear(tmp_path: Path) -> None:
    async def scenario() -> None:
        session = SQLiteSession("s1", tmp_path / "m.db")
        assert isinstance(session, Session)
        items = [
            {"role": "user", "content": "hi — ünïcode"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ]
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[1:]
        assert await session.pop_item() == items[2]
        assert await SQLiteSession("other", tmp_path / "m.db").get_items() == []
        await session.set_summary(RunningSummary("earlier stuff", 1))
        assert await session.get_summary() == RunningSummary("earlier stuff", 1)
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.get_summary() is None
        assert await session.pop_item() is None

    asyncio.run(scenario())


def test_session_persists_across_processes(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    script = textwrap.dedent(
        f"""
        import asyncio
        from switchyard.agents.memory.session import SQLiteSession
        session = SQLiteSession("shared", {str(db)!r})
        asyncio.run(session.add_items([{{"role": "user", "content": "from the child process"}}]))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=120)

    async def read() -> list[dict]:
        session = SQLiteSession("shared", db)
        await session.add_items([{"role": "assistant", "content": "parent reply"}])
        return await session.get_items()

    assert [m["content"] for m in asyncio.run(read())] == ["from the child process", "parent reply"]
