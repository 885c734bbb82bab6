"""A run that kills itself with SIGKILL at a chosen point, for the checkpoint tests (run as a subprocess).

Usage: python crash_worker.py DB OUTBOX KILL_AT IDEMPOTENT
(KILL_AT: in_tool, after_timeout, before_answer, in_concurrent_tools, never)

`in_concurrent_tools`: one turn sends to ana and bo at once; ana's call returns only once bo's has sent, and
the process dies right after ana's result is committed, while bo's call is still running.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from scripted_model import ScriptedModel, call, calls, say

from switchyard.agents import Agent, CheckpointStore, Runner, RunState, ToolContext, tool
from switchyard.agents.model import ModelRequest, ModelResponse

RUN_ID = "crash-run"
WAIT = 10.0
"""Seconds ana's call waits for bo's to have sent (only reached when the calls do not overlap)."""


def build_agent(outbox: Path, kill_at: str, idempotent: bool) -> Agent:
    bo_sent = threading.Event()

    @tool(side_effects="acting", idempotent=idempotent, timeout=1.0 if kill_at == "after_timeout" else None)
    def send_message(to: str, text: str, context: ToolContext) -> str:
        """Send a message (appends a line to the outbox file)."""
        lines = outbox.read_text().splitlines() if outbox.exists() else []
        if idempotent and any(line.startswith(context.idempotency_key + " ") for line in lines):
            return "sent (already)"
        with outbox.open("a") as out:
            out.write(f"{context.idempotency_key} {to}: {text}\n")
        if kill_at == "in_tool":
            os.kill(os.getpid(), signal.SIGKILL)  # the effect happened; its result was never recorded
        if kill_at == "after_timeout":
            time.sleep(30)  # past the tool's timeout: the call is abandoned while its thread runs on
        if kill_at == "in_concurrent_tools" and to == "bo":
            bo_sent.set()
            time.sleep(30)  # still running when the process dies
        if kill_at == "in_concurrent_tools" and not bo_sent.wait(WAIT):
            raise RuntimeError("bo's call did not run alongside")
        return "sent"

    def answer(request: ModelRequest) -> ModelResponse:
        if kill_at == "before_answer":
            os.kill(os.getpid(), signal.SIGKILL)
        return say("Message sent.")

    turn = call("send_message", {"to": "ana", "text": "hello"})
    if kill_at == "in_concurrent_tools":
        turn = calls(
            ("send_message", {"to": "ana", "text": "hello"}, "c_ana"),
            ("send_message", {"to": "bo", "text": "hello"}, "c_bo"),
        )
    model = ScriptedModel([turn, answer])
    return Agent(name="courier", tools=[send_message], client=model)


class _DiesAfterTimeout(CheckpointStore):
    """Dies right after recording a timed-out effect, before the call's result is committed."""

    def effect_timed_out(self, key: str) -> None:
        super().effect_timed_out(key)
        os.kill(os.getpid(), signal.SIGKILL)


class _DiesAfterFirstResult(CheckpointStore):
    """Dies right after the first tool result of the turn is committed (the other call still running)."""

    def save(self, state: RunState, kind: str, payload: str) -> None:
        super().save(state, kind, payload)
        if kind == "tool_result":
            os.kill(os.getpid(), signal.SIGKILL)


def runner_for(db: Path, agent: Agent, kill_at: str = "never") -> Runner:
    stores = {"after_timeout": _DiesAfterTimeout, "in_concurrent_tools": _DiesAfterFirstResult}
    store = stores.get(kill_at, CheckpointStore)(db)
    return Runner(store=store, agents=[agent])


if __name__ == "__main__":
    db, outbox, kill_at, idempotent = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
    agent = build_agent(outbox, kill_at, idempotent)
    result = runner_for(db, agent, kill_at).run_sync(agent, "tell ana hello", run_id=RUN_ID)
    print(result.status.value)
