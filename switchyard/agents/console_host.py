"""The web console's agent view served beside a process that runs agents (`switchyard agent demo --approve
console`): a paused run waits there for Approve or Reject, which resume it in this process, where its tools
live."""

from __future__ import annotations

import asyncio
from typing import TextIO

import uvicorn

from switchyard.agents.console_app import AgentRuns, build_agent_console_app
from switchyard.agents.result import RunResult
from switchyard.agents.runner import Runner
from switchyard.errors import SwitchyardError


class ConsoleStartError(SwitchyardError):
    """The console of `--approve console` could not serve its page."""


class ConsoleHost:
    """The console on a loopback port, served by uvicorn in this event loop."""

    def __init__(self, runs: AgentRuns, server: uvicorn.Server, task: asyncio.Task[None]) -> None:
        self.runs = runs
        self.server = server
        self.task = task

    @classmethod
    async def start(cls, runner: Runner, port: int, out: TextIO) -> ConsoleHost:
        app = build_agent_console_app(runner)
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()  # the bind failed: raise its error
                raise ConsoleStartError(f"the console did not start on port {port}")
            await asyncio.sleep(0.05)
        bound = server.servers[0].sockets[0].getsockname()[1]
        print(f"approvals: open http://127.0.0.1:{bound}/ui/#agents", file=out, flush=True)
        return cls(app.state.agent_runs, server, task)

    async def wait_for_decisions(self, paused: RunResult, out: TextIO) -> RunResult:
        """Until the run, resumed from the console, stops for something other than an approval."""
        print("  waiting for a decision in the console…", file=out, flush=True)
        self.runs.results.pop(paused.run_id, None)
        while True:
            result = self.runs.results.get(paused.run_id)
            if result is not None and not result.interrupted:
                return result
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task
