"""An agent host's web console: the runs of a checkpoint store, each as a timeline, and Approve / Reject for
the calls waiting on a human, which resume the run.

Resuming needs the agents' tools, which live in the process that runs them, so the agent host serves this app
itself (`build_agent_console_app(runner)`, or `switchyard agent demo --approve console`); the model server
and the gateway never import agents. A decision is checkpointed (an `approval` step) before the run resumes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from switchyard import __version__
from switchyard.agents.checkpoint import CheckpointStore, RunNotFoundError
from switchyard.agents.limits import RunStatus
from switchyard.agents.result import RunResult
from switchyard.agents.runner import Runner
from switchyard.agents.state import ApprovalError, RunState
from switchyard.bearer_key import BearerKeyMiddleware
from switchyard.console.mount import ConsoleConfig, mount_console
from switchyard.openai_error import ErrorInfo

logger = logging.getLogger(__name__)


class Decision(BaseModel):
    """A human's answer to one waiting call."""

    call_id: str
    approve: bool
    reason: str | None = None


class AgentRuns:
    """The runs of `runner.store`, and decisions that resume them on `runner` in the background."""

    def __init__(self, runner: Runner) -> None:
        if runner.store is None:
            raise ValueError("the agent console needs a Runner with a checkpoint store (Runner(store=...))")
        self.runner = runner
        self.store: CheckpointStore = runner.store
        self._resuming: dict[str, asyncio.Task[RunResult]] = {}
        self.results: dict[str, RunResult] = {}
        """What each resume returned, by run id (the newest), for a host that waits on its runs."""

    def list(self) -> list[dict[str, Any]]:
        updated = self.store.run_updates()
        return [summary(self.store.load(run_id), updated[run_id]) for run_id in reversed(list(updated))]

    def detail(self, run_id: str) -> dict[str, Any]:
        state = self.store.load(run_id)
        return {
            "run": summary(state, self.store.run_updates().get(run_id, 0.0)),
            "steps": timeline(state, self.store),
            "approvals": [
                {
                    "call_id": a.call_id,
                    "agent": a.agent,
                    "tool": a.tool,
                    "arguments": a.arguments,
                    "reason": a.reason,
                }
                for a in state.approvals()
            ],
        }

    def decide(self, run_id: str, decision: Decision) -> RunState:
        """Record the decision; once no call of the run waits any more, resume it in the background."""
        if run_id in self._resuming:
            raise ApprovalError(f"run {run_id!r} is already resuming")
        state = self.store.load(run_id)
        if decision.approve:
            state.approve(decision.call_id)
        else:
            state.reject(decision.call_id, decision.reason or "rejected in the console")
        tool = next(call.name for call in state.pending if call.call_id == decision.call_id)
        payload = {
            "call_id": decision.call_id,
            "tool": tool,
            "approved": decision.approve,
            "reason": decision.reason,
        }
        self.store.save(state, "approval", json.dumps(payload, ensure_ascii=False))
        if not state.approvals():
            task = asyncio.create_task(self.runner.resume(state))
            self._resuming[run_id] = task
            task.add_done_callback(lambda done: self._resumed(run_id, done))
        return state

    def _resumed(self, run_id: str, task: asyncio.Task[RunResult]) -> None:
        self._resuming.pop(run_id, None)
        if task.cancelled():
            return
        if task.exception() is not None:
            logger.error("resuming run %s failed", run_id, exc_info=task.exception())
            return
        self.results[run_id] = task.result()

    async def wait_idle(self) -> None:
        """Until every resumed run has returned (the app's shutdown)."""
        await asyncio.gather(*self._resuming.values(), return_exceptions=True)


def summary(state: RunState, updated: float) -> dict[str, Any]:
    return {
        "run_id": state.run_id,
        "root_agent": state.root_agent,
        "current_agent": state.current_agent,
        "input": state.input,
        "status": state.status.value,
        "status_detail": state.status_detail,
        "turns": state.turns,
        "usage": {"input_tokens": state.usage.input_tokens, "output_tokens": state.usage.output_tokens},
        "cost": state.cost,
        "final_output": state.final_output if state.status is RunStatus.COMPLETED else None,
        "updated": updated,
    }


def timeline(state: RunState, store: CheckpointStore) -> list[dict[str, Any]]:
    """The run's steps with their payloads parsed; a context step that changed agent is marked a handoff."""
    agent = state.root_agent
    steps = []
    for record in store.steps(state.run_id):
        payload: Any = record.payload
        if record.kind != "input":
            try:
                payload = json.loads(record.payload)
            except json.JSONDecodeError:
                payload = record.payload
        if record.kind == "context" and isinstance(payload, dict):
            payload["handoff"] = payload.get("agent") != agent
            agent = payload.get("agent", agent)
        steps.append({"step": record.step, "kind": record.kind, "payload": payload})
    return steps


def build_agent_console_app(runner: Runner, *, api_key: str | None = None) -> FastAPI:
    """The console's agent view over `runner`'s checkpoint store, behind `api_key` when one is given."""
    runs = AgentRuns(runner)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await runs.wait_idle()  # a resumed run checkpoints its end before the host goes

    app = FastAPI(title="Switchyard agents", version=__version__, lifespan=lifespan)
    app.state.agent_runs = runs
    app.include_router(_routes(runs))
    mount_console(app, ConsoleConfig("Switchyard agents", ("agents",), key_required=api_key is not None))
    if api_key is not None:
        app.add_middleware(BearerKeyMiddleware, key=api_key)
    return app


def _error(info: ErrorInfo) -> Response:
    return JSONResponse(info.body(), status_code=info.status)


def _routes(runs: AgentRuns) -> APIRouter:
    router = APIRouter(prefix="/v1/agent")

    @router.get("/runs", response_model=None)
    async def list_runs() -> Response:
        return JSONResponse({"object": "list", "data": runs.list()})

    @router.get("/runs/{run_id}", response_model=None)
    async def get_run(run_id: str) -> Response:
        try:
            return JSONResponse(runs.detail(run_id))
        except RunNotFoundError:
            return _error(ErrorInfo(404, "invalid_request_error", f"no run {run_id!r}", param="run_id"))

    @router.post("/runs/{run_id}/decisions", response_model=None)
    async def decide(run_id: str, request: Request) -> Response:
        try:
            decision = Decision.model_validate_json(await request.body())
        except ValidationError as exc:
            message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return _error(ErrorInfo(400, "invalid_request_error", message))
        try:
            state = runs.decide(run_id, decision)
        except RunNotFoundError:
            return _error(ErrorInfo(404, "invalid_request_error", f"no run {run_id!r}", param="run_id"))
        except ApprovalError as exc:
            return _error(ErrorInfo(409, "invalid_request_error", str(exc), param="call_id"))
        waiting = len(state.approvals())
        return JSONResponse({"run_id": run_id, "resuming": waiting == 0, "waiting": waiting}, status_code=202)

    return router
