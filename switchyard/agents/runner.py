"""The agent loop: call the model, validate and run its tool calls, enforce limits, pause, persist, resume.

One iteration is one turn: check the limits, call the model, record its output as a step, then resolve its
tool calls one by one (each result is a step). Every step is checkpointed before the next begins, so a run
can stop for any reason (a limit, an approval, a crash) and continue from exactly there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from switchyard.agents.agent import Agent, Handoff, agents_reachable
from switchyard.agents.checkpoint import CheckpointStore
from switchyard.agents.context_budget import ContextBudget, ContextOverflowError
from switchyard.agents.events import (
    ApprovalRequested,
    EventSink,
    HandedOff,
    ModelDelta,
    RunEvent,
    RunFinished,
    ToolCalled,
    ToolResult,
    ignore,
)
from switchyard.agents.guardrails import first_tripped
from switchyard.agents.injection import (
    Caller,
    InjectionPolicy,
    approval_reason,
    missing_scopes,
    new_nonce,
    spotlight,
    system_notice,
)
from switchyard.agents.limits import PriceTable, RunLimits, RunStatus, call_signature
from switchyard.agents.memory import RunningSummary, Session
from switchyard.agents.model import ModelClient, ModelRequest, ModelResponse, ToolCallRequest
from switchyard.agents.result import RunResult
from switchyard.agents.state import CallStatus, PendingCall, RunState
from switchyard.agents.tool import FunctionTool, ToolArgumentsError, ToolContext
from switchyard.agents.tracing import AgentTracer

FINAL_ANSWER_TOOL = "final_answer"


class UnknownAgentError(KeyError):
    """A resumed run names an agent this runner was not given."""


@dataclass
class _Clock:
    """Wall-clock seconds of work in this run, summed across the processes that worked on it."""

    base: float
    start: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return self.base + time.monotonic() - self.start


class _RunTimeout(Exception):
    pass


@dataclass
class _Turn:
    """What the runner needs while driving one run (not persisted: rebuilt on resume)."""

    state: RunState
    limits: RunLimits
    clock: _Clock
    emit: EventSink


class Runner:
    """Runs agents against a model endpoint with hard limits, approvals, injection defences and checkpoints."""

    def __init__(
        self,
        client: ModelClient | None = None,
        *,
        store: CheckpointStore | None = None,
        prices: PriceTable | None = None,
        limits: RunLimits | None = None,
        policy: InjectionPolicy | None = None,
        tracer: AgentTracer | None = None,
        agents: Sequence[Agent] = (),
        context_budget: ContextBudget | None = None,
    ) -> None:
        """`context_budget`: fit each model call into the model's context window (older turns summarised,
        newest verbatim; see agents/context_budget.py); None sends the whole transcript."""
        self.context_budget = context_budget
        self.client = client
        self.store = store
        self.prices = prices or PriceTable()
        self.limits = limits or RunLimits()
        self.policy = policy or InjectionPolicy()
        self.tracer = tracer or AgentTracer()
        self._agents: dict[str, Agent] = {}
        for agent in agents:
            self._register(agent)

    # ------------------------------------------------------------------------------------------ public API

    async def run(
        self,
        agent: Agent,
        input: str,
        *,
        caller: Caller | None = None,
        limits: RunLimits | None = None,
        run_id: str | None = None,
        emit: EventSink = ignore,
        session: Session | None = None,
    ) -> RunResult:
        """Run `agent` on `input`. With a `session`, its history comes first and the run's new messages are
        appended to it when the run returns (finished, stopped by a limit, or paused for approval)."""
        self._register(agent)
        caller = caller or Caller()
        history = list(await session.get_items()) if session is not None else []
        state = RunState(
            run_id=run_id or uuid.uuid4().hex,
            root_agent=agent.name,
            current_agent=agent.name,
            input=input,
            caller=caller.name,
            scopes=sorted(caller.scopes),
            messages=[*history, {"role": "user", "content": input}],
            nonce=new_nonce(),
            # Tool results in the history are untrusted content already in the context.
            tainted=any(m.get("role") == "tool" for m in history),
            session_saved=len(history),
        )
        turn = _Turn(state, limits or self.limits, _Clock(0.0), emit)
        self._save(turn, "input", input)
        tripped = first_tripped(agent.input_guardrails, input)
        if tripped is not None:
            result = self._finish(turn, RunStatus.GUARDRAIL_TRIPPED, f"input guardrail: {tripped.message}")
        else:
            result = await self._drive(turn)
        await _save_to_session(session, state)
        return result

    async def resume(
        self,
        run: str | RunState,
        *,
        limits: RunLimits | None = None,
        emit: EventSink = ignore,
        session: Session | None = None,
    ) -> RunResult:
        """Continue a run from its checkpoint (by id) or from a state (after approve/reject, or from JSON);
        with the run's `session`, the messages added since the last return are appended to it."""
        state = self._checkpoint(run) if isinstance(run, str) else run
        turn = _Turn(state, limits or self.limits, _Clock(state.elapsed_s), emit)
        if state.status is RunStatus.COMPLETED:
            await _save_to_session(session, state)
            return self._result(state)
        state.status = RunStatus.RUNNING
        result = await self._drive(turn)
        await _save_to_session(session, state)
        return result

    def run_sync(self, agent: Agent, input: str, **kwargs: Any) -> RunResult:
        return asyncio.run(self.run(agent, input, **kwargs))

    def resume_sync(self, run: str | RunState, **kwargs: Any) -> RunResult:
        return asyncio.run(self.resume(run, **kwargs))

    def run_streamed(self, agent: Agent, input: str, **kwargs: Any) -> RunStream:
        return RunStream(lambda emit: self.run(agent, input, emit=emit, **kwargs))

    def resume_streamed(self, run: str | RunState, **kwargs: Any) -> RunStream:
        return RunStream(lambda emit: self.resume(run, emit=emit, **kwargs))

    # ------------------------------------------------------------------------------------------ the loop

    async def _drive(self, turn: _Turn) -> RunResult:
        state = turn.state
        with self.tracer.span(
            "run", run_id=state.run_id, agent=state.root_agent, caller=state.caller
        ) as span:
            try:
                result = await self._loop(turn)
            except _RunTimeout:
                result = self._finish(turn, RunStatus.TIMEOUT, f"run exceeded {turn.limits.timeout} s")
            span.set_attribute("switchyard.status", result.status.value)
            span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
            span.set_attribute("switchyard.cost_usd", result.cost)
            span.set_attribute("switchyard.turns", result.turns)
        return result

    async def _loop(self, turn: _Turn) -> RunResult:
        state = turn.state
        while True:
            if state.pending:
                outcome = await self._resolve_calls(turn)
            else:
                reached = self._limit_reached(turn)
                if reached is not None:
                    return self._finish(turn, *reached)
                with self.tracer.span("turn", turn=state.turns + 1, agent=state.current_agent):
                    outcome = await self._model_turn(turn)
                    if outcome is None and state.pending:
                        outcome = await self._resolve_calls(turn)
            if outcome is not None:
                return outcome

    def _limit_reached(self, turn: _Turn) -> tuple[RunStatus, str] | None:
        state, limits = turn.state, turn.limits
        if limits.max_turns is not None and state.turns >= limits.max_turns:
            return RunStatus.MAX_TURNS, f"reached max_turns={limits.max_turns}"
        if limits.timeout is not None and turn.clock.elapsed() >= limits.timeout:
            return RunStatus.TIMEOUT, f"run exceeded {limits.timeout} s"
        if limits.max_tokens is not None and state.usage.total_tokens >= limits.max_tokens:
            return RunStatus.MAX_TOKENS, f"used {state.usage.total_tokens} of max_tokens={limits.max_tokens}"
        if limits.max_cost is not None and state.cost >= limits.max_cost:
            return RunStatus.MAX_COST, f"spent ${state.cost:.6f} of max_cost=${limits.max_cost}"
        return None

    async def _bounded(self, turn: _Turn, awaitable: Any) -> Any:
        """Await within what is left of the run's timeout."""
        if turn.limits.timeout is None:
            return await awaitable
        remaining = turn.limits.timeout - turn.clock.elapsed()
        try:
            return await asyncio.wait_for(awaitable, max(remaining, 0.0))
        except TimeoutError:
            if turn.clock.elapsed() >= turn.limits.timeout:
                raise _RunTimeout from None
            raise  # a tool's own timeout, inside the run's

    # ------------------------------------------------------------------------------------------ model turn

    async def _model_turn(self, turn: _Turn) -> RunResult | None:
        state = turn.state
        agent = self._agent(state.current_agent)
        request = self._request(turn, agent)
        if self.context_budget is not None:
            summary = RunningSummary(**state.summary) if state.summary else None
            try:
                fitted = await self.context_budget.fit(request.messages[:1], request.messages[1:], summary)
            except ContextOverflowError as exc:
                return self._finish(turn, RunStatus.MODEL_ERROR, f"context budget: {exc}")
            request = dataclasses.replace(request, messages=fitted.messages)
            state.summary = None if fitted.summary is None else dataclasses.asdict(fitted.summary)
        client = agent.client or self.client
        if client is None:
            raise ValueError(f"agent {agent.name!r} has no model client and the runner has no default")
        on_delta = None if turn.emit is ignore else (lambda text: turn.emit(ModelDelta(agent.name, text)))
        with self.tracer.span("model_call", model=agent.model, agent=agent.name) as span:
            try:
                response: ModelResponse = await self._bounded(turn, client.complete(request, on_delta))
            except _RunTimeout:
                raise
            except Exception as exc:  # the endpoint failed: end the run, keeping its state for a resume
                return self._finish(turn, RunStatus.MODEL_ERROR, f"{type(exc).__name__}: {exc}")
            cost = self.prices.cost(agent.model, response.usage)
            span.set_attribute("gen_ai.request.model", agent.model)
            span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
            span.set_attribute("switchyard.cost_usd", cost)
            span.set_attribute("switchyard.tool_calls", len(response.tool_calls))
        state.turns += 1
        state.usage.add(response.usage)
        state.cost += cost
        message: dict[str, Any] = {"role": "assistant", "content": response.content}
        if response.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in response.tool_calls
            ]
        state.messages.append(message)
        state.step += 1
        state.pending = [self._validate_call(turn, agent, call) for call in response.tool_calls]
        bad = any(c.is_error for c in state.pending)
        state.bad_call_streak = state.bad_call_streak + 1 if bad else 0
        final = self._final_from_tool(agent, state.pending) if not bad else None
        if not response.tool_calls:
            final, problem = self._final_from_text(agent, response.content or "")
            if problem is not None:
                state.bad_call_streak += 1
                state.messages.append({"role": "user", "content": problem})
        self._save(turn, "model_output", json.dumps(message, ensure_ascii=False))
        for call in state.pending:
            turn.emit(ToolCalled(agent.name, call.call_id, call.name, call.arguments))
        return self._after_model_turn(turn, agent, response, final)

    def _after_model_turn(
        self, turn: _Turn, agent: Agent, response: ModelResponse, final: tuple[Any] | None
    ) -> RunResult | None:
        state, limits = turn.state, turn.limits
        if final is not None:
            tripped = first_tripped(agent.output_guardrails, _as_text(final[0]))
            if tripped is not None:
                return self._finish(turn, RunStatus.GUARDRAIL_TRIPPED, f"output guardrail: {tripped.message}")
            state.final_output = final[0]
            state.pending = []
            return self._finish(turn, RunStatus.COMPLETED, "")
        if state.bad_call_streak > limits.max_tool_retries:
            return self._finish(
                turn,
                RunStatus.TOOL_RETRIES_EXHAUSTED,
                f"{state.bad_call_streak} invalid replies in a row (max_tool_retries={limits.max_tool_retries})",
            )
        if limits.loop_threshold is not None:
            for call in response.tool_calls:
                count = state.call_counts.get(call_signature(call.name, call.arguments), 0)
                if count >= limits.loop_threshold:
                    return self._finish(
                        turn,
                        RunStatus.LOOP_DETECTED,
                        f"{call.name} called {count} times with the same arguments",
                    )
        if limits.max_tokens is not None and state.usage.total_tokens >= limits.max_tokens:
            return self._finish(turn, RunStatus.MAX_TOKENS, f"used {state.usage.total_tokens} tokens")
        if limits.max_cost is not None and state.cost >= limits.max_cost:
            return self._finish(turn, RunStatus.MAX_COST, f"spent ${state.cost:.6f}")
        return None

    def _request(self, turn: _Turn, agent: Agent) -> ModelRequest:
        state, settings = turn.state, agent.settings
        system = agent.instructions
        if self.policy.spotlight:
            system = f"{system}\n\n{system_notice(state.nonce)}"
        specs = [t.spec() for t in self._offered(agent, state)]
        specs += [h.spec() for h in agent.handoff_list()]
        if agent.output_type is not None:
            specs.append(_final_answer_spec(agent.output_type))
        seen_tools = any(m.get("role") == "tool" for m in state.messages)
        max_tokens = settings.max_tokens
        if turn.limits.max_tokens is not None:
            left = max(turn.limits.max_tokens - state.usage.total_tokens, 1)
            max_tokens = min(max_tokens or left, left)
        return ModelRequest(
            model=agent.model,
            messages=[{"role": "system", "content": system}, *state.messages],
            tools=specs,
            tool_choice=settings.tool_choice_after_tools if seen_tools else settings.tool_choice,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_tokens=max_tokens,
            seed=settings.seed,
            parallel_tool_calls=settings.parallel_tool_calls,
            extra_body=dict(settings.extra_body),
        )

    def _offered(self, agent: Agent, state: RunState) -> list[FunctionTool]:
        """The agent's allowlisted tools the caller holds the scopes for."""
        caller = Caller(state.caller, frozenset(state.scopes))
        return [t for t in agent.allowed_tools() if not missing_scopes(t, caller)]

    def _validate_call(self, turn: _Turn, agent: Agent, call: ToolCallRequest) -> PendingCall:
        """A pending call with validated arguments, or one already DONE with the error the model must see."""
        state = turn.state
        pending = PendingCall(call.id, call.name, {}, state.step)
        state.call_counts[call_signature(call.name, call.arguments)] = (
            state.call_counts.get(call_signature(call.name, call.arguments), 0) + 1
        )
        handoffs = {h.tool_name: h for h in agent.handoff_list()}
        if call.name in handoffs:
            return pending
        if call.name == FINAL_ANSWER_TOOL and agent.output_type is not None:
            try:
                value = _final_adapter(agent.output_type).validate_json(call.arguments or "{}")
            except pydantic.ValidationError as exc:
                schema = _final_answer_spec(agent.output_type)["function"]["parameters"]
                return _error(
                    pending, f"Error: invalid final answer: {_errors(exc)}. Schema: {json.dumps(schema)}"
                )
            pending.arguments = _final_adapter(agent.output_type).dump_python(value, mode="json")
            return pending
        tool = next((t for t in agent.allowed_tools() if t.name == call.name), None)
        offered = [t.name for t in self._offered(agent, state)]
        if tool is None:
            return _error(
                pending,
                f"Error: unknown tool {call.name!r}. Available tools: {', '.join(offered) or 'none'}.",
            )
        lacking = missing_scopes(tool, Caller(state.caller, frozenset(state.scopes)))
        if lacking:
            return _error(
                pending,
                f"Error: {call.name} is not permitted for this caller (missing scopes: {', '.join(sorted(lacking))}).",
            )
        try:
            pending.arguments = tool.parse_arguments(call.arguments)
        except ToolArgumentsError as exc:
            return _error(
                pending,
                f"Error: {exc}. The call was not run. Arguments schema: {json.dumps(tool.parameters)}",
            )
        return pending

    def _final_from_tool(self, agent: Agent, calls: list[PendingCall]) -> tuple[Any] | None:
        if agent.output_type is None:
            return None
        for call in calls:
            if call.name == FINAL_ANSWER_TOOL:
                value = call.arguments
                if _is_wrapped(agent.output_type):
                    value = value["value"]
                return (value,)
        return None

    def _final_from_text(self, agent: Agent, text: str) -> tuple[tuple[Any] | None, str | None]:
        """(final output, None) or (None, the problem to tell the model)."""
        if agent.output_type is None:
            return (text,), None
        adapter = pydantic.TypeAdapter(agent.output_type)
        try:
            return (adapter.dump_python(adapter.validate_json(text), mode="json"),), None
        except pydantic.ValidationError as exc:
            schema = _final_answer_spec(agent.output_type)["function"]["parameters"]
            return None, (
                f"Your final answer must be JSON matching this schema (or a {FINAL_ANSWER_TOOL} call): "
                f"{json.dumps(schema)}. Problem: {_errors(exc)}"
            )

    # ------------------------------------------------------------------------------------------ tool calls

    async def _resolve_calls(self, turn: _Turn) -> RunResult | None:
        """Run, or wait for decisions on, the last turn's calls; when all have results, add them to the context."""
        state = turn.state
        agent = self._agent(state.current_agent)
        handoffs = {h.tool_name: h for h in agent.handoff_list()}
        handoff: Handoff | None = None
        for call in state.pending:
            if call.status is CallStatus.DONE:
                continue
            if call.name in handoffs:
                if handoff is None:
                    handoff = handoffs[call.name]
                    self._complete(turn, agent, call, f"Transferred to {handoff.agent.name}.", error=False)
                else:
                    self._complete(turn, agent, call, "Error: only one handoff per turn.", error=True)
                continue
            tool = next(t for t in agent.allowed_tools() if t.name == call.name)
            if call.status is CallStatus.PENDING:
                reason = approval_reason(tool, call.arguments, state.tainted, self.policy)
                if reason is not None:
                    call.status = CallStatus.AWAITING_APPROVAL
                    call.approval_reason = reason
                    continue
            if call.status is CallStatus.AWAITING_APPROVAL:
                continue
            if call.status is CallStatus.REJECTED:
                with self.tracer.span("approval", tool=tool.name, call_id=call.call_id, approved=False):
                    text = f"The user rejected this call: {call.decision_reason}. It was not run."
                self._complete(turn, agent, call, text, error=True)
                continue
            if call.status is CallStatus.APPROVED:
                with self.tracer.span("approval", tool=tool.name, call_id=call.call_id, approved=True):
                    pass
            text, error = await self._execute(turn, tool, call)
            self._complete(
                turn, agent, call, text, error=error, untrusted=tool.untrusted_output and not error
            )
        waiting = state.approvals()
        if waiting:
            for item in waiting:
                turn.emit(ApprovalRequested(item))
            return self._finish(turn, RunStatus.NEEDS_APPROVAL, f"{len(waiting)} call(s) need approval")
        self._commit_results(turn, agent, handoff)
        return None

    async def _execute(self, turn: _Turn, tool: FunctionTool, call: PendingCall) -> tuple[str, bool]:
        """(result text, is_error); an acting tool's effect is bracketed in the store by its idempotency key."""
        state = turn.state
        key = f"{state.run_id}:{call.step}:{call.call_id}"
        tracked = self.store is not None and tool.acting
        with self.tracer.span("tool_call", tool=tool.name, call_id=call.call_id, idempotency_key=key) as span:
            if tracked:
                assert self.store is not None
                effect = self.store.effect(key)
                if effect is not None and effect.status == "done":
                    span.set_attribute("switchyard.replayed", True)
                    return effect.result or "", False
                if effect is not None and not tool.idempotent:
                    span.set_attribute("switchyard.interrupted_effect", True)
                    return (
                        f"Error: an earlier attempt of {tool.name} was interrupted before it reported; it may "
                        "have taken effect, so it was not run again.",
                        True,
                    )
                self.store.effect_started(key, state.run_id, tool.name)
            context = ToolContext(state.run_id, key, state.caller, frozenset(state.scopes))
            try:
                text, error = await self._bounded(turn, tool.invoke(call.arguments, context)), False
            except _RunTimeout:
                raise
            except TimeoutError:
                text, error = f"Error: {tool.name} timed out after {tool.timeout} s.", True
            except Exception as exc:
                text, error = f"Error: {tool.name} failed: {type(exc).__name__}: {exc}", True
            if tracked and not error:
                assert self.store is not None
                self.store.effect_done(key, text)
            span.set_attribute("switchyard.is_error", error)
        return text, error

    def _complete(
        self, turn: _Turn, agent: Agent, call: PendingCall, text: str, *, error: bool, untrusted: bool = False
    ) -> None:
        call.status = CallStatus.DONE
        call.result = text
        call.is_error = error
        call.untrusted = untrusted
        turn.state.step += 1
        self._save(
            turn, "tool_result", json.dumps({"call_id": call.call_id, "tool": call.name, "result": text})
        )
        turn.emit(ToolResult(agent.name, call.call_id, call.name, text, error))

    def _commit_results(self, turn: _Turn, agent: Agent, handoff: Handoff | None) -> None:
        """Move the finished calls' results into the context (spotlighting untrusted ones) as one step."""
        state = turn.state
        for call in state.pending:
            content = call.result or ""
            if call.untrusted:
                state.tainted = True
                if self.policy.spotlight:
                    content = spotlight(content, state.nonce)
            state.messages.append({"role": "tool", "tool_call_id": call.call_id, "content": content})
        state.pending = []
        if handoff is not None:
            with self.tracer.span("handoff", source=agent.name, target=handoff.agent.name):
                self._register(handoff.agent)
                state.current_agent = handoff.agent.name
                if handoff.history_filter is not None:
                    state.messages = handoff.history_filter(list(state.messages))
            turn.emit(HandedOff(agent.name, handoff.agent.name))
        state.step += 1
        self._save(turn, "context", json.dumps({"agent": state.current_agent, "tainted": state.tainted}))

    # ------------------------------------------------------------------------------------------ bookkeeping

    def _finish(self, turn: _Turn, status: RunStatus, detail: str) -> RunResult:
        state = turn.state
        state.status = status
        state.status_detail = detail
        self._save(turn, "finish", json.dumps({"status": status.value, "detail": detail}))
        result = self._result(state)
        turn.emit(RunFinished(result))
        return result

    def _result(self, state: RunState) -> RunResult:
        final = None
        if state.status is RunStatus.COMPLETED:
            output_type = self._agent(state.current_agent).output_type
            final = state.final_output
            if output_type is not None:
                final = pydantic.TypeAdapter(output_type).validate_python(state.final_output)
        return RunResult(
            run_id=state.run_id,
            status=state.status,
            status_detail=state.status_detail,
            final_output=final,
            partial_output=state.last_assistant_text(),
            messages=list(state.messages),
            usage=state.usage,
            cost=state.cost,
            turns=state.turns,
            last_agent=state.current_agent,
            pending_approvals=state.approvals(),
            state=state,
        )

    def _save(self, turn: _Turn, kind: str, payload: str) -> None:
        turn.state.elapsed_s = turn.clock.elapsed()
        if self.store is not None:
            self.store.save(turn.state, kind, payload)

    def _checkpoint(self, run_id: str) -> RunState:
        if self.store is None:
            raise ValueError("resuming by run id needs a runner with a CheckpointStore")
        return self.store.load(run_id)

    def _register(self, agent: Agent) -> None:
        self._agents.update(agents_reachable(agent))

    def _agent(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            raise UnknownAgentError(
                f"agent {name!r} is unknown to this runner; pass it in Runner(agents=[...])"
            ) from None


class RunStream:
    """A run whose events arrive as they happen: `async for event in stream.events()`, then `stream.result`."""

    def __init__(self, start: Any) -> None:
        self._start = start
        self.result: RunResult | None = None

    async def events(self) -> AsyncIterator[RunEvent]:
        queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        task = asyncio.ensure_future(self._start(queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        while (event := await queue.get()) is not None:
            yield event
        self.result = await task


def _error(call: PendingCall, text: str) -> PendingCall:
    call.status = CallStatus.DONE
    call.result = text
    call.is_error = True
    return call


def _errors(exc: pydantic.ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors())


def _is_wrapped(output_type: type[Any]) -> bool:
    """Tool arguments must be an object: other output types travel as {"value": ...}."""
    return pydantic.TypeAdapter(output_type).json_schema().get("type") != "object"


def _final_adapter(output_type: type[Any]) -> pydantic.TypeAdapter[Any]:
    if _is_wrapped(output_type):
        return pydantic.TypeAdapter(
            pydantic.create_model(
                "final_answer", __config__=pydantic.ConfigDict(extra="forbid"), value=(output_type, ...)
            )
        )
    return pydantic.TypeAdapter(output_type)


def _final_answer_spec(output_type: type[Any]) -> dict[str, Any]:
    schema = _final_adapter(output_type).json_schema()
    schema.setdefault("additionalProperties", False)
    return {
        "type": "function",
        "function": {
            "name": FINAL_ANSWER_TOOL,
            "description": "Give the final answer.",
            "parameters": schema,
        },
    }


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


async def _save_to_session(session: Session | None, state: RunState) -> None:
    """Append the messages the session does not have yet (each message is saved exactly once)."""
    if session is None:
        return
    new = state.messages[state.session_saved :]
    if new:
        await session.add_items(new)
        state.session_saved = len(state.messages)
