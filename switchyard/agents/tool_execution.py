"""Running one model turn's tool calls: decisions first (handoffs, approvals, rejections), then the calls.

Concurrency (`Agent.tool_concurrency`): the calls that may run now are taken in the model's order and grouped
into batches that run one after another; the calls of a batch run concurrently (async tools on the event loop,
sync tools each on a thread of its own). By default the whole turn is one batch, as in the OpenAI Agents SDK;
`ACTING_IN_ORDER` gives each acting call a batch of its own, so effects happen in the model's order and the
reads around them see them; `SEQUENTIAL` runs every call alone. Each call is committed to the store as a step
the moment it finishes (so the step log is in completion order) and an acting call is bracketed in the store
by its idempotency key, so a crash while several run at once reruns none that may have taken effect; the
transcript gets the results in call order when the runner commits them. A call that fails or times out gets
an error result and costs the others nothing.

Timeouts: a call past its tool's `timeout` is abandoned (`ToolTimeoutError`); the model gets a timeout error and
whatever the call returns later is discarded. An acting call that timed out, or was still running when the
run's own time limit came, may have taken effect (a sync tool's thread may still be running it): it is recorded
`timed_out` under its idempotency key and given its error result at once, so no resume runs it again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterable
from typing import Any

from switchyard.agents.active_run import ActiveRun, RunTimeoutReached
from switchyard.agents.agent import Agent, Handoff, ToolConcurrency
from switchyard.agents.call_validation import allowed_tool, unknown_tool_text
from switchyard.agents.events import ToolResult
from switchyard.agents.injection import InjectionPolicy, approval_reason
from switchyard.agents.state import CallStatus, PendingCall
from switchyard.agents.tool import FunctionTool, ToolContext, ToolTimeoutError
from switchyard.agents.tracing import AgentTracer

Runnable = tuple[FunctionTool, PendingCall]


async def run_tool_calls(
    run: ActiveRun, agent: Agent, *, tracer: AgentTracer, policy: InjectionPolicy
) -> Handoff | None:
    """Give every pending call of the turn a result, except those waiting for a human; returns the turn's
    handoff, if it made one."""
    runnable = decide_calls(run, agent, tracer=tracer, policy=policy)
    for batch in batches(runnable, agent.tool_concurrency):
        await run_all(_run_call(run, agent, tool, call, tracer) for tool, call in batch)
    return turn_handoff(agent, run.state.pending)


def decide_calls(
    run: ActiveRun, agent: Agent, *, tracer: AgentTracer, policy: InjectionPolicy
) -> list[Runnable]:
    """Settle what needs no execution (handoffs, rejections), mark calls needing approval as waiting, and
    return the calls to run now, in the model's order."""
    state = run.state
    handoffs = {h.tool_name: h for h in agent.handoff_list()}
    handed_off = turn_handoff(agent, state.pending) is not None
    runnable: list[Runnable] = []
    for call in state.pending:
        if call.status is CallStatus.DONE:
            continue
        if call.name in handoffs:
            if handed_off:
                complete_call(run, agent, call, "Error: only one handoff per turn.", error=True)
            else:
                handed_off = True
                complete_call(
                    run, agent, call, f"Transferred to {handoffs[call.name].agent.name}.", error=False
                )
            continue
        tool = allowed_tool(agent, call.name)
        if tool is None:  # validated against an agent redefined since (a resume): never run it
            complete_call(run, agent, call, unknown_tool_text(agent, state, call.name), error=True)
            continue
        if call.status is CallStatus.PENDING:
            reason = approval_reason(tool, call.arguments, state.tainted, policy)
            if reason is not None:
                call.status = CallStatus.AWAITING_APPROVAL
                call.approval_reason = reason
        if call.status is CallStatus.AWAITING_APPROVAL:
            continue
        if call.status is CallStatus.REJECTED:
            with tracer.span("approval", tool=tool.name, call_id=call.call_id, approved=False):
                text = f"The user rejected this call: {call.decision_reason}. It was not run."
            complete_call(run, agent, call, text, error=True)
            continue
        if call.status is CallStatus.APPROVED:
            with tracer.span("approval", tool=tool.name, call_id=call.call_id, approved=True):
                pass
        runnable.append((tool, call))
    return runnable


def batches(calls: list[Runnable], concurrency: ToolConcurrency) -> list[list[Runnable]]:
    """Groups to run one after another, in the model's order; the calls of a group run concurrently."""
    if concurrency is ToolConcurrency.CONCURRENT:
        return [calls] if calls else []
    if concurrency is ToolConcurrency.SEQUENTIAL:
        return [[item] for item in calls]
    groups: list[list[Runnable]] = []
    for item in calls:
        if item[0].acting or not groups or groups[-1][0][0].acting:
            groups.append([item])
        else:
            groups[-1].append(item)
    return groups


async def run_all(coroutines: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run the coroutines concurrently, every one to its end even when another fails, then raise the first
    failure (in their order); cancelled, they are all cancelled."""
    tasks = [asyncio.create_task(c) for c in coroutines]
    if not tasks:
        return
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    for task in tasks:
        failure = task.exception()
        if failure is not None:
            raise failure


def turn_handoff(agent: Agent, calls: list[PendingCall]) -> Handoff | None:
    """The handoff the turn made: its first handoff call, once that has its (successful) result."""
    handoffs = {h.tool_name: h for h in agent.handoff_list()}
    for call in calls:
        if call.name in handoffs and call.status is CallStatus.DONE:
            return None if call.is_error else handoffs[call.name]
    return None


def complete_call(
    run: ActiveRun, agent: Agent, call: PendingCall, text: str, *, error: bool, untrusted: bool = False
) -> None:
    """Give a call its result and commit that as a step before anything else happens."""
    call.status = CallStatus.DONE
    call.result = text
    call.is_error = error
    call.untrusted = untrusted
    run.state.step += 1
    run.save("tool_result", json.dumps({"call_id": call.call_id, "tool": call.name, "result": text}))
    run.emit(ToolResult(agent.name, call.call_id, call.name, text, error))


async def _run_call(
    run: ActiveRun, agent: Agent, tool: FunctionTool, call: PendingCall, tracer: AgentTracer
) -> None:
    try:
        text, error = await _execute(run, tool, call, tracer)
    except RunTimeoutReached:
        if tool.acting:  # it may have taken effect: settle it now, so that no resume runs it again
            text = (
                f"Error: {tool.name} was still running when the run reached its time limit "
                f"({run.limits.timeout} s); it was abandoned, may have taken effect, and was not run again."
            )
            complete_call(run, agent, call, text, error=True)
        raise  # a read-only call stays pending: a resume runs it again
    complete_call(run, agent, call, text, error=error, untrusted=tool.untrusted_output and not error)


async def _execute(
    run: ActiveRun, tool: FunctionTool, call: PendingCall, tracer: AgentTracer
) -> tuple[str, bool]:
    """(result text, is_error); an acting tool's effect is bracketed in the store by its idempotency key."""
    state = run.state
    key = f"{state.run_id}:{call.step}:{call.call_id}"
    effects = run.store if tool.acting else None
    with tracer.span("tool_call", tool=tool.name, call_id=call.call_id, idempotency_key=key) as span:
        if effects is not None:
            effect = effects.effect(key)
            if effect is not None and effect.status == "done":
                span.set_attribute("switchyard.replayed", True)
                return effect.result or "", False
            if effect is not None and effect.status == "timed_out":
                span.set_attribute("switchyard.timed_out_effect", True)
                return (
                    f"Error: an earlier attempt of {tool.name} timed out; it may have taken effect, so it was "
                    "not run again.",
                    True,
                )
            if effect is not None and not tool.idempotent:
                span.set_attribute("switchyard.interrupted_effect", True)
                return (
                    f"Error: an earlier attempt of {tool.name} was interrupted before it reported; it may "
                    "have taken effect, so it was not run again.",
                    True,
                )
            effects.effect_started(key, state.run_id, tool.name)
        context = ToolContext(state.run_id, key, state.caller, frozenset(state.scopes))
        try:
            text, error = await run.bounded(tool.invoke(call.arguments, context)), False
        except (ToolTimeoutError, RunTimeoutReached) as exc:
            span.set_attribute("switchyard.timed_out", True)
            if effects is not None:
                effects.effect_timed_out(key)
            if isinstance(exc, RunTimeoutReached):
                raise
            text, error = _timeout_text(tool, exc), True
        except Exception as exc:
            text, error = f"Error: {tool.name} failed: {type(exc).__name__}: {exc}", True
        if effects is not None and not error:
            effects.effect_done(key, text)
        span.set_attribute("switchyard.is_error", error)
    return text, error


def _timeout_text(tool: FunctionTool, exc: ToolTimeoutError) -> str:
    text = f"Error: {exc}; the call was abandoned and any later result is discarded."
    if tool.acting:
        text += " It may still have taken effect: check before calling it again."
    return text
