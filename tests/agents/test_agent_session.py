"""A Runner with a session: history comes first, new messages are appended once, across runs and resumes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from scripted_model import ScriptedModel, call, say

from switchyard.agents import Agent, Runner, RunStatus, SideEffects, tool
from switchyard.agents.memory import SQLiteSession
from switchyard.agents.model import ModelRequest, ModelResponse


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(side_effects=SideEffects.ACTING, needs_approval=True)
def send(text: str) -> str:
    """Send a message."""
    return "sent"


def test_history_is_loaded_and_new_messages_are_saved_once(tmp_path: Path) -> None:
    session = SQLiteSession("s1", path=tmp_path / "memory.db")
    seen: list[list[dict]] = []  # type: ignore[type-arg]

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(list(request.messages))
        return say(f"answer {len(seen)}")

    agent = Agent(
        name="a", instructions="Be brief.", tools=[add], client=ScriptedModel([answer], repeat_last=True)
    )
    runner = Runner()
    first = runner.run_sync(agent, "hello", session=session)
    assert first.status is RunStatus.COMPLETED
    second = runner.run_sync(agent, "again", session=SQLiteSession("s1", path=tmp_path / "memory.db"))
    assert second.final_output == "answer 2"
    contents = [m.get("content") for m in seen[1] if m["role"] != "system"]
    assert contents == ["hello", "answer 1", "again"]  # the first run's turn came back from SQLite
    stored = asyncio.run(SQLiteSession("s1", path=tmp_path / "memory.db").get_items())
    assert [m.get("content") for m in stored] == ["hello", "answer 1", "again", "answer 2"]


def test_a_paused_run_saves_what_it_has_and_its_resume_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    agent = Agent(
        name="a",
        instructions="Send things.",
        tools=[send],
        client=ScriptedModel([call("send", {"text": "hi"}), say("done")]),
    )
    runner = Runner()
    paused = runner.run_sync(agent, "send hi", session=SQLiteSession("s2", path=path))
    assert paused.status is RunStatus.NEEDS_APPROVAL
    saved = asyncio.run(SQLiteSession("s2", path=path).get_items())
    assert saved[0]["content"] == "send hi" and saved[-1]["role"] == "assistant"
    state = paused.state
    state.approve(state.approvals()[0].call_id)
    done = runner.resume_sync(state, session=SQLiteSession("s2", path=path))
    assert done.status is RunStatus.COMPLETED
    stored = asyncio.run(SQLiteSession("s2", path=path).get_items())
    assert [m["role"] for m in stored] == [m["role"] for m in done.messages]  # each message exactly once
