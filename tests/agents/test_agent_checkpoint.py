"""Checkpoints: kill -9 a run in a subprocess at several points, resume it here, and no effect happens twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from crash_worker import RUN_ID, build_agent, runner_for
from scripted_model import ScriptedModel, call, say

from switchyard.agents import Agent, CheckpointStore, RunLimits, Runner, RunStatus, tool

ROOT = Path(__file__).resolve().parents[2]


def crash(tmp_path: Path, kill_at: str, idempotent: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent)])}
    args = [str(tmp_path / "runs.db"), str(tmp_path / "outbox.txt"), kill_at, "1" if idempotent else "0"]
    return subprocess.run(
        [sys.executable, str(Path(__file__).parent / "crash_worker.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("kill_at", "idempotent", "tool_reply"),
    [
        ("in_tool", False, "interrupted before it reported"),  # not retried: it may have taken effect
        ("in_tool", True, "sent (already)"),  # retried with the same key; the tool dedupes
        # timed out (recorded under its key), then killed before its result was committed: never rerun
        ("after_timeout", False, "earlier attempt of send_message timed out"),
        ("after_timeout", True, "earlier attempt of send_message timed out"),
        ("before_answer", False, "sent"),  # the result was committed; resume only asks the model again
    ],
)
def test_kill_9_then_resume_without_duplicated_side_effects(
    tmp_path: Path, kill_at: str, idempotent: bool, tool_reply: str
) -> None:
    process = crash(tmp_path, kill_at, idempotent)
    assert process.returncode == -signal.SIGKILL, process.stderr
    outbox = tmp_path / "outbox.txt"
    assert len(outbox.read_text().splitlines()) == 1
    agent = build_agent(outbox, "never", idempotent)
    result = runner_for(tmp_path / "runs.db", agent).resume_sync(RUN_ID)
    assert result.status is RunStatus.COMPLETED and result.final_output == "Message sent."
    assert len(outbox.read_text().splitlines()) == 1
    tool_message = next(m for m in result.messages if m["role"] == "tool")
    assert tool_reply in tool_message["content"]
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool", "assistant"]


def test_every_step_is_logged_and_the_database_is_wal(tmp_path: Path) -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    store = CheckpointStore(tmp_path / "runs.db")
    agent = Agent(name="p", tools=[ping], client=ScriptedModel([call("ping", {}), say("pong!")]))
    result = Runner(store=store).run_sync(agent, "ping")
    kinds = [s.kind for s in store.steps(result.run_id)]
    assert kinds == ["input", "model_output", "tool_result", "context", "model_output", "finish"]
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.load(result.run_id).to_json() == result.state.to_json()


def test_a_run_stopped_by_a_limit_resumes_with_a_larger_one(tmp_path: Path) -> None:
    @tool
    def step(n: int) -> int:
        """Next step."""
        return n + 1

    model = ScriptedModel([call("step", {"n": 1}), call("step", {"n": 2}), say("finished")])
    agent = Agent(name="s", tools=[step], client=model)
    runner = Runner(store=CheckpointStore(tmp_path / "runs.db"), limits=RunLimits(max_turns=2))
    stopped = runner.run_sync(agent, "go")
    assert stopped.status is RunStatus.MAX_TURNS
    done = Runner(store=CheckpointStore(tmp_path / "runs.db"), agents=[agent]).resume_sync(
        stopped.run_id, limits=RunLimits(max_turns=5)
    )
    assert done.completed and done.turns == 3 and done.messages[:4] == stopped.messages[:4]


@pytest.mark.parametrize(
    ("idempotent", "bo_reply"),
    [(False, "interrupted before it reported"), (True, "sent (already)")],
    ids=["not-idempotent", "idempotent"],
)
def test_kill_9_while_two_acting_calls_run_at_once_reruns_neither(
    tmp_path: Path, idempotent: bool, bo_reply: str
) -> None:
    """The turn's two sends overlap (ana's returns only once bo's has sent); the process dies once ana's
    result is committed, with bo's call still running. The resume keeps ana's committed result and reruns
    bo's call only if its tool dedupes on the idempotency key."""
    process = crash(tmp_path, "in_concurrent_tools", idempotent)
    assert process.returncode == -signal.SIGKILL, process.stderr
    outbox = tmp_path / "outbox.txt"
    assert sorted(line.split(" ", 1)[1] for line in outbox.read_text().splitlines()) == [
        "ana: hello",
        "bo: hello",
    ]
    agent = build_agent(outbox, "never", idempotent)
    result = runner_for(tmp_path / "runs.db", agent).resume_sync(RUN_ID)
    assert result.status is RunStatus.COMPLETED and result.final_output == "Message sent."
    assert len(outbox.read_text().splitlines()) == 2  # no effect happened twice
    replies = {m["tool_call_id"]: str(m["content"]) for m in result.messages if m["role"] == "tool"}
    assert list(replies) == ["c_ana", "c_bo"]  # call order
    assert "\nsent\n" in replies["c_ana"]  # committed before the crash, not run again
    assert bo_reply in replies["c_bo"]
