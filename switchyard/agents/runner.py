"""The agent loop: call the model, validate and run its tool calls, enforce limits, pause, persist, resume.

One iteration is one turn: check the limits, call the model, record its output as a step (its calls
validated, `call_validation.py`), then resolve its tool calls (`tool_execution.py`: the calls of a turn run
concurrently unless `Agent.tool_concurrency` says otherwise; each result is a step) and commit the results to
the transcript in call order. Every step is checkpointed before the next begins, so a run can stop for any
reason (a limit, an approval, a crash) and continue from exactly there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
import weakref
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

import pydantic

from switchyard.agents.active_run import ActiveRun, RunClock, RunTimeoutReached
from switchyard.agents.agent import Agent, Handoff, agents_reachable
from switchyard.agents.call_validation import offered_tools, validate_call
from switchyard.agents.chat_model import ChatReply
from switchyard.agents.checkpoint import CheckpointStore
from switchyard.agents.events import (
    ApprovalRequested,
    EventSink,
    HandedOff,
    ModelDelta,
    ReasoningDelta,
    RunEvent,
    RunFinished,
    ToolCalled,
    ToolResult,
    ignore,
)
from switchyard.agents.final_answer import (
    FINAL_ANSWER_TOOL,
    closing_replies,
    final_answer_spec,
    final_call,
    final_from_text,
    final_from_tool,
    is_runner_reply,
)
from switchyard.agents.guardrails import first_tripped
from switchyard.agents.injection import Caller, InjectionPolicy, new_nonce, spotlight, system_notice
from switchyard.agents.limits import PriceTable, RunLimits, RunStatus, call_signature
from switchyard.agents.memory.context_budget import ContextBudget, ContextOverflowError
from switchyard.agents.memory.session import RunningSummary, Session
from switchyard.agents.model import ModelClient, ModelRequest, ModelResponse, StreamCallbacks
from switchyard.agents.reply_budget import (
    cut_before_any_text,
    cut_call,
    retry_max_tokens,
    tokens_left,
    turn_max_tokens,
    worth_asking_again,
)
from switchyard.agents.result import RunResult
from switchyard.agents.state import CallStatus, PendingCall, RunState
from switchyard.agents.tool_execution import run_tool_calls
from switchyard.agents.tracing import AgentTracer
from switchyard.agents.transcript import answer_unreplied_calls

__all__ = ["FINAL_ANSWER_TOOL", "RunStream", "Runner", "UnknownAgentError"]


class UnknownAgentError(KeyError):
    """A resumed run names an agent this runner was not given."""


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
        self._sync_loop: asyncio.AbstractEventLoop | None = None
        self._close_sync_loop: weakref.finalize | None = None

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
        history = answer_unreplied_calls(list(await session.get_items())) if session is not None else []
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
            tainted=any(m.get("role") == "tool" and not is_runner_reply(m) for m in history),
            session_saved=len(history),  # the replies `answer_unreplied_calls` added are never saved
        )
        active = self._active(state, limits, RunClock(0.0), emit)
        active.save("input", input)
        tripped = first_tripped(agent.input_guardrails, input)
        if tripped is not None:
            result = self._finish(active, RunStatus.GUARDRAIL_TRIPPED, f"input guardrail: {tripped.message}")
        else:
            result = await self._drive(active)
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
        with the run's `session`, the messages added since the last return are appended to it. A run that has
        not called the model yet passes its input guardrails again first: its input reaches the model only
        through them (a run they stopped stays stopped)."""
        state = self._checkpoint(run) if isinstance(run, str) else run
        active = self._active(state, limits, RunClock(state.elapsed_s), emit)
        if state.status is RunStatus.COMPLETED:
            await _save_to_session(session, state)
            return self._result(state)
        state.status = RunStatus.RUNNING
        tripped = None
        if state.turns == 0:
            tripped = first_tripped(self._agent(state.root_agent).input_guardrails, state.input)
        if tripped is not None:
            result = self._finish(active, RunStatus.GUARDRAIL_TRIPPED, f"input guardrail: {tripped.message}")
        else:
            result = await self._drive(active)
        await _save_to_session(session, state)
        return result

    def run_sync(self, agent: Agent, input: str, **kwargs: Any) -> RunResult:
        return self._in_sync_loop(self.run(agent, input, **kwargs))

    def resume_sync(self, run: str | RunState, **kwargs: Any) -> RunResult:
        return self._in_sync_loop(self.resume(run, **kwargs))

    def close(self) -> None:
        """Close the event loop the sync calls share (a later sync call opens a new one); a runner that is
        dropped without this closes it when it is collected."""
        if self._sync_loop is None:
            return
        self._sync_loop.run_until_complete(self._sync_loop.shutdown_asyncgens())
        if self._close_sync_loop is not None:
            self._close_sync_loop()  # closes the loop once; the finaliser then never runs again
        self._sync_loop = self._close_sync_loop = None

    def _in_sync_loop(self, work: Coroutine[Any, Any, RunResult]) -> RunResult:
        """Run `work` on the one event loop this runner's sync calls share. An async HTTP client (the openai
        client) keeps pooled connections bound to the loop that opened them, so a resume in a fresh loop, as
        `asyncio.run` would give it, fails with "Event loop is closed"."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            work.close()
            raise RuntimeError(
                "the sync API cannot run inside an event loop; await Runner.run or Runner.resume"
            )
        if self._sync_loop is None:
            self._sync_loop = asyncio.new_event_loop()
            self._close_sync_loop = weakref.finalize(self, self._sync_loop.close)
        return self._sync_loop.run_until_complete(work)

    def run_streamed(self, agent: Agent, input: str, **kwargs: Any) -> RunStream:
        return RunStream(lambda emit: self.run(agent, input, emit=emit, **kwargs))

    def resume_streamed(self, run: str | RunState, **kwargs: Any) -> RunStream:
        return RunStream(lambda emit: self.resume(run, emit=emit, **kwargs))

    # ------------------------------------------------------------------------------------------ the loop

    def _active(
        self, state: RunState, limits: RunLimits | None, clock: RunClock, emit: EventSink
    ) -> ActiveRun:
        return ActiveRun(state, limits or self.limits, clock, emit, self.store)

    async def _drive(self, run: ActiveRun) -> RunResult:
        state = run.state
        with self.tracer.span(
            "run", run_id=state.run_id, agent=state.root_agent, caller=state.caller
        ) as span:
            try:
                result = await self._loop(run)
            except RunTimeoutReached:
                result = self._finish(run, RunStatus.TIMEOUT, f"run exceeded {run.limits.timeout} s")
            span.set_attribute("switchyard.status", result.status.value)
            span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
            span.set_attribute("switchyard.cost_usd", result.cost)
            span.set_attribute("switchyard.turns", result.turns)
        return result

    async def _loop(self, run: ActiveRun) -> RunResult:
        state = run.state
        while True:
            if state.pending:
                outcome = await self._resolve_calls(run)
            else:
                reached = self._limit_reached(run)
                if reached is not None:
                    return self._finish(run, *reached)
                with self.tracer.span("turn", turn=state.turns + 1, agent=state.current_agent):
                    outcome = await self._model_turn(run)
                    if outcome is None and state.pending:
                        outcome = await self._resolve_calls(run)
            if outcome is not None:
                return outcome

    def _limit_reached(self, run: ActiveRun) -> tuple[RunStatus, str] | None:
        state, limits = run.state, run.limits
        if limits.max_turns is not None and state.turns >= limits.max_turns:
            return RunStatus.MAX_TURNS, f"reached max_turns={limits.max_turns}"
        if limits.timeout is not None and run.clock.elapsed() >= limits.timeout:
            return RunStatus.TIMEOUT, f"run exceeded {limits.timeout} s"
        return self._over_budget(run)

    # ------------------------------------------------------------------------------------------ model turn

    async def _model_turn(self, run: ActiveRun) -> RunResult | None:
        state = run.state
        agent = self._agent(state.current_agent)
        request = self._request(run, agent)
        if self.context_budget is not None:
            summary = RunningSummary(**state.summary) if state.summary else None
            try:
                fitted = await run.bounded(
                    self.context_budget.fit(request.messages[:1], request.messages[1:], summary)
                )
            except RunTimeoutReached:
                raise
            except ContextOverflowError as exc:
                return self._finish(run, RunStatus.MODEL_ERROR, f"context budget: {exc}")
            except Exception as exc:  # the summariser's or recall's endpoint failed: as a failed model call
                return self._finish(
                    run, RunStatus.MODEL_ERROR, f"context budget: {type(exc).__name__}: {exc}"
                )
            state.summary = None if fitted.summary is None else dataclasses.asdict(fitted.summary)
            if fitted.spent:
                self._count_summaries(fitted.spent, agent, state)
                reached = self._over_budget(run)
                if reached is not None:
                    return self._finish(run, *reached)
                request = self._request(run, agent)  # the reply budget left after the summaries
            request = dataclasses.replace(request, messages=fitted.messages)
        client = agent.client or self.client
        if client is None:
            raise ValueError(f"agent {agent.name!r} has no model client and the runner has no default")
        response = await self._call_model(run, agent, client, request)
        if isinstance(response, Exception):  # the endpoint failed: the run ends, resumable
            return self._finish(run, RunStatus.MODEL_ERROR, f"{type(response).__name__}: {response}")
        retry = None
        if worth_asking_again(response):
            retry = retry_max_tokens(agent.settings, request.max_tokens, tokens_left(run.limits, state.usage))
        retry_failure = None
        if retry is not None:  # asked again with room to close the call; the cut attempt is not kept
            again = await self._call_model(run, agent, client, dataclasses.replace(request, max_tokens=retry))
            if isinstance(again, Exception):  # e.g. no room for that budget in the context: report the cut
                retry_failure = f"asked again with max_tokens={retry}: {type(again).__name__}: {again}"
            else:
                request, response = dataclasses.replace(request, max_tokens=retry), again
        state.turns += 1
        message: dict[str, Any] = {"role": "assistant", "content": response.content}
        if response.reasoning:
            message["reasoning_content"] = response.reasoning
        if response.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in response.tool_calls
            ]
        state.messages.append(message)
        state.step += 1
        for call in response.tool_calls:
            signature = call_signature(call.name, call.arguments)
            state.call_counts[signature] = state.call_counts.get(signature, 0) + 1
        broken = cut_call(response)
        calls = [validate_call(state, agent, call, cut=call is broken) for call in response.tool_calls]
        answered = final_call(agent, calls)
        final = final_from_tool(agent, answered)
        # A valid final answer ends the run (accepted or blocked by a guardrail): the turn's other calls,
        # valid or not, are never run, so none is left pending for a resume (final_answer.py).
        state.pending = [] if final is not None else calls
        bad = any(c.is_error for c in state.pending)
        state.bad_call_streak = state.bad_call_streak + 1 if bad else 0
        if not response.tool_calls and not response.cut_short:
            final, problem = final_from_text(agent, response.content or "")
            if problem is not None:
                state.bad_call_streak += 1
                state.messages.append({"role": "user", "content": problem})
        run.save("model_output", json.dumps(message, ensure_ascii=False))
        for pending, written in zip(calls, response.tool_calls, strict=True):
            run.emit(
                ToolCalled(agent.name, pending.call_id, pending.name, pending.arguments, written.arguments)
            )
            if final is None and pending.status is CallStatus.DONE:  # refused by validation: never run
                run.emit(ToolResult(agent.name, pending.call_id, pending.name, pending.result or "", True))
        return self._after_model_turn(
            run, agent, response, final, calls, answered, request.max_tokens, retry_failure
        )

    def _after_model_turn(
        self,
        run: ActiveRun,
        agent: Agent,
        response: ModelResponse,
        final: tuple[Any] | None,
        calls: list[PendingCall],
        answered: PendingCall | None,
        asked: int | None,
        retry_failure: str | None,
    ) -> RunResult | None:
        """`asked`: the max_tokens of the request that got `response`; `retry_failure`: why asking a cut
        call again failed, if it did."""
        state, limits = run.state, run.limits
        if final is not None:
            tripped = first_tripped(agent.output_guardrails, _as_text(final[0]))
            if answered is not None:  # the answer came as a call: every call of the turn gets its reply
                state.messages.extend(closing_replies(calls, answered, accepted=tripped is None))
            if tripped is not None:
                return self._finish(run, RunStatus.GUARDRAIL_TRIPPED, f"output guardrail: {tripped.message}")
            state.final_output = final[0]
            return self._finish(run, RunStatus.COMPLETED, "")
        if response.cut_short and (not calls or any(c.is_error for c in calls)):
            return self._finish_cut_reply(run, asked, response, retry_failure)  # asked again already
        if state.bad_call_streak > limits.max_tool_retries:
            return self._finish(
                run,
                RunStatus.TOOL_RETRIES_EXHAUSTED,
                f"{state.bad_call_streak} invalid replies in a row (max_tool_retries={limits.max_tool_retries})",
            )
        if limits.loop_threshold is not None:
            for call in response.tool_calls:
                count = state.call_counts.get(call_signature(call.name, call.arguments), 0)
                if count >= limits.loop_threshold:
                    return self._finish(
                        run,
                        RunStatus.LOOP_DETECTED,
                        f"{call.name} called {count} times with the same arguments",
                    )
        reached = self._over_budget(run)
        return None if reached is None else self._finish(run, *reached)

    def _finish_cut_reply(
        self, run: ActiveRun, asked: int | None, response: ModelResponse, retry_failure: str | None
    ) -> RunResult:
        """A reply (text, or a call the cut left invalid) that stopped at a token limit: MAX_TOKENS when the run's
        own budget ran out, otherwise TRUNCATED (the request's max_tokens or the server's context)."""
        reached = self._over_budget(run)
        if reached is not None:
            status, detail = reached
            return self._finish(run, status, f"{detail}; the last reply was cut short")
        where = "the server's limit" if asked is None else f"max_tokens={asked}"
        broken = cut_call(response)
        inside = "" if broken is None else f" inside a call to {broken.name} (its arguments never closed)"
        if cut_before_any_text(response):
            inside = " before any text or call was shown"
        detail = f"the reply was cut short at {where}{inside} (finish_reason 'length')"
        if retry_failure is not None:
            detail += f"; {retry_failure}"
        return self._finish(run, RunStatus.TRUNCATED, detail)

    async def _call_model(
        self, run: ActiveRun, agent: Agent, client: ModelClient, request: ModelRequest
    ) -> ModelResponse | Exception:
        """One request to the endpoint, its usage and cost added to the run's; a failure is returned for the
        caller to report."""
        state = run.state
        on_delta = None
        if run.emit is not ignore:
            on_delta = StreamCallbacks(
                content=lambda text: run.emit(ModelDelta(agent.name, text)),
                reasoning=lambda text: run.emit(ReasoningDelta(agent.name, text)),
            )
        with self.tracer.span("model_call", model=agent.model, agent=agent.name) as span:
            try:
                response: ModelResponse = await run.bounded(client.complete(request, on_delta))
            except RunTimeoutReached:
                raise
            except Exception as exc:
                return exc
            cost = self.prices.cost(agent.model, response.usage)
            span.set_attribute("gen_ai.request.model", agent.model)
            if request.max_tokens is not None:
                span.set_attribute("gen_ai.request.max_tokens", request.max_tokens)
            span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
            span.set_attribute("switchyard.cost_usd", cost)
            span.set_attribute("switchyard.tool_calls", len(response.tool_calls))
            if response.finish_reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
        state.usage.add(response.usage)
        state.cost += cost
        return response

    @staticmethod
    def _over_budget(run: ActiveRun) -> tuple[RunStatus, str] | None:
        """The token or cost limit the run has reached, with its reason; None while both have room."""
        limits, state = run.limits, run.state
        if limits.max_tokens is not None and state.usage.total_tokens >= limits.max_tokens:
            return RunStatus.MAX_TOKENS, f"used {state.usage.total_tokens} of max_tokens={limits.max_tokens}"
        if limits.max_cost is not None and state.cost >= limits.max_cost:
            return RunStatus.MAX_COST, f"spent ${state.cost:.6f} of max_cost=${limits.max_cost}"
        return None

    def _count_summaries(self, replies: Sequence[ChatReply], agent: Agent, state: RunState) -> None:
        """Summaries written to fit the run's context are the run's spending too."""
        for reply in replies:
            if reply.usage is None:
                continue
            model = reply.model or agent.model
            cost = self.prices.cost(model, reply.usage)
            with self.tracer.span("summarise", model=model, agent=agent.name) as span:
                span.set_attribute("gen_ai.request.model", model)
                span.set_attribute("gen_ai.usage.input_tokens", reply.usage.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", reply.usage.output_tokens)
                span.set_attribute("switchyard.cost_usd", cost)
            state.usage.add(reply.usage)
            state.cost += cost

    def _request(self, run: ActiveRun, agent: Agent) -> ModelRequest:
        state, settings = run.state, agent.settings
        system = agent.instructions
        if self.policy.spotlight:
            system = f"{system}\n\n{system_notice(state.nonce)}"
        tools = offered_tools(agent, state)
        specs = [t.spec() for t in tools]
        specs += [h.spec() for h in agent.handoff_list()]
        if agent.output_type is not None:
            specs.append(final_answer_spec(agent.output_type))
        seen_tools = any(m.get("role") == "tool" for m in state.messages)
        max_tokens = turn_max_tokens(settings, tools, tokens_left(run.limits, state.usage))
        messages = state.messages
        if not settings.replay_reasoning:
            messages = [_without_reasoning(m) for m in messages]
        return ModelRequest(
            model=agent.model,
            messages=[{"role": "system", "content": system}, *messages],
            tools=specs,
            tool_choice=settings.tool_choice_after_tools if seen_tools else settings.tool_choice,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_tokens=max_tokens,
            seed=settings.seed,
            parallel_tool_calls=settings.parallel_tool_calls,
            extra_body=dict(settings.extra_body),
        )

    # ------------------------------------------------------------------------------------------ tool calls

    async def _resolve_calls(self, run: ActiveRun) -> RunResult | None:
        """Run, or wait for decisions on, the last turn's calls; when all have results, add them to the context."""
        agent = self._agent(run.state.current_agent)
        handoff = await run_tool_calls(run, agent, tracer=self.tracer, policy=self.policy)
        waiting = run.state.approvals()
        if waiting:
            for item in waiting:
                run.emit(ApprovalRequested(item))
            return self._finish(run, RunStatus.NEEDS_APPROVAL, f"{len(waiting)} call(s) need approval")
        self._commit_results(run, agent, handoff)
        return None

    def _commit_results(self, run: ActiveRun, agent: Agent, handoff: Handoff | None) -> None:
        """Move the finished calls' results into the context in call order (spotlighting untrusted ones) as
        one step."""
        state = run.state
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
            run.emit(HandedOff(agent.name, handoff.agent.name))
        state.step += 1
        run.save("context", json.dumps({"agent": state.current_agent, "tainted": state.tainted}))

    # ------------------------------------------------------------------------------------------ bookkeeping

    def _finish(self, run: ActiveRun, status: RunStatus, detail: str) -> RunResult:
        state = run.state
        state.status = status
        state.status_detail = detail
        run.save("finish", json.dumps({"status": status.value, "detail": detail}))
        result = self._result(state)
        run.emit(RunFinished(result))
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
    """A run whose events arrive as they happen: `async for event in stream.events()`, then `stream.result`.

    A consumer that stops reading early (leaves the loop, or calls `cancel()`) stops the run too, instead of
    leaving it working unseen: the run is cancelled where it stands, `result` stays None, and with a
    CheckpointStore `Runner.resume(run_id)` continues it from its last saved step, as after a crash.
    """

    def __init__(self, start: Any) -> None:
        self._start = start
        self._task: asyncio.Future[RunResult] | None = None
        self.result: RunResult | None = None

    async def events(self) -> AsyncIterator[RunEvent]:
        queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        task = self._task = asyncio.ensure_future(self._start(queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            if not task.done():  # the consumer left before the run ended
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if not task.cancelled():
            self.result = await task

    def cancel(self) -> None:
        """Stop the run (its events end); what it saved so far stays resumable."""
        if self._task is not None and not self._task.done():
            self._task.cancel()


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


def _without_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    if "reasoning_content" not in message:
        return message
    return {k: v for k, v in message.items() if k != "reasoning_content"}
