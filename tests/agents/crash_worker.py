"""A run that kills itself with SIGKILL at a chosen point, for the checkpoint tests (run as a subprocess).

Usage: python crash_worker.py DB OUTBOX KILL_AT IDEMPOTENT   (KILL_AT: in_tool, before_answer, never)
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from scripted_model import ScriptedModel, call, say

from switchyard.agents import Agent, CheckpointStore, Runner, ToolContext, tool
from switchyard.agents.model import ModelRequest, ModelResponse

RUN_ID = "crash-run"


def build_agent(outbox: Path, kill_at: str, idempotent: bool) -> Agent:
    @tool(side_effects="acting", idempotent=idempotent)
    def send_message(to: str, text: str, context: ToolContext) -> str:
        """Send a message (appends a line to the outbox file)."""
        lines = outbox.read_text().splitlines() if outbox.exists() else []
        if idempotent and any(line.startswith(context.idempotency_key + " ") for line in lines):
            return "sent (already)"
        with outbox.open("a") as out:
            out.write(f"{context.idempotency_key} {to}: {text}\n")
        if kill_at == "in_tool":
            os.kill(os.getpid(), signal.SIGKILL)  # the effect happened; its result was never recorded
        return "sent"

    def answer(request: ModelRequest) -> ModelResponse:
        if kill_at == "before_answer":
            os.kill(os.getpid(), signal.SIGKILL)
        return say("Message sent.")

    model = ScriptedModel([call("send_message", {"to": "ana", "text": "hello"}), answer])
    return Agent(name="courier", tools=[send_message], client=model)


def runner_for(db: Path, agent: Agent) -> Runner:
    return Runner(store=CheckpointStore(db), agents=[agent])


if __name__ == "__main__":
    db, outbox, kill_at, idempotent = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
    agent = build_agent(outbox, kill_at, idempotent)
    result = runner_for(db, agent).run_sync(agent, "tell ana hello", run_id=RUN_ID)
    print(result.status.value)
