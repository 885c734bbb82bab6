"""Validating the model's tool calls before anything runs: unknown tool, scopes, JSON, schema.

A bad call becomes a finished call whose result tells the model what is wrong (with the schema); nothing is
ever dispatched with arguments that failed validation.
"""

from __future__ import annotations

import json

import pydantic

from switchyard.agents.agent import Agent
from switchyard.agents.final_answer import FINAL_ANSWER_TOOL, final_adapter, final_answer_spec
from switchyard.agents.injection import Caller, missing_scopes
from switchyard.agents.model import ToolCallRequest
from switchyard.agents.state import CallStatus, PendingCall, RunState
from switchyard.agents.tool import FunctionTool, ToolArgumentsError, validation_problems


def offered_tools(agent: Agent, state: RunState) -> list[FunctionTool]:
    """The agent's allowlisted tools the caller holds the scopes for."""
    caller = Caller(state.caller, frozenset(state.scopes))
    return [t for t in agent.allowed_tools() if not missing_scopes(t, caller)]


def allowed_tool(agent: Agent, name: str) -> FunctionTool | None:
    """The agent's allowlisted tool of that name, or None."""
    return next((t for t in agent.allowed_tools() if t.name == name), None)


def unknown_tool_text(agent: Agent, state: RunState, name: str) -> str:
    """The error result of a call to a tool the agent does not have (or no longer has, on a resume)."""
    offered = [t.name for t in offered_tools(agent, state)]
    return f"Error: unknown tool {name!r}; the call was not run. Available tools: {', '.join(offered) or 'none'}."


CUT_CALL_TEXT = (
    "Error: the reply reached its token limit before these arguments were complete (finish_reason 'length'); "
    "the call was not run."
)


def validate_call(state: RunState, agent: Agent, call: ToolCallRequest, cut: bool = False) -> PendingCall:
    """A pending call with validated arguments, or one already DONE with the error the model must see; `cut`:
    the reply stopped inside this call, so its broken JSON is reported as cut rather than as invalid."""
    pending = PendingCall(call.id, call.name, {}, state.step)
    if cut:
        return _refused(pending, CUT_CALL_TEXT)
    handoff = next((h for h in agent.handoff_list() if h.tool_name == call.name), None)
    if handoff is not None:
        problem = _handoff_arguments_problem(call.arguments)
        if problem is not None:
            schema = handoff.spec()["function"]["parameters"]
            return _refused(
                pending,
                f"Error: {problem}. The handoff was not made. Arguments schema: {json.dumps(schema)}",
            )
        return pending
    if call.name == FINAL_ANSWER_TOOL and agent.output_type is not None:
        try:
            value = final_adapter(agent.output_type).validate_json(call.arguments or "{}")
        except pydantic.ValidationError as exc:
            schema = final_answer_spec(agent.output_type)["function"]["parameters"]
            return _refused(
                pending,
                f"Error: invalid final answer: {validation_problems(exc)}. Schema: {json.dumps(schema)}",
            )
        pending.arguments = final_adapter(agent.output_type).dump_python(value, mode="json")
        return pending
    tool = allowed_tool(agent, call.name)
    if tool is None:
        return _refused(pending, unknown_tool_text(agent, state, call.name))
    lacking = missing_scopes(tool, Caller(state.caller, frozenset(state.scopes)))
    if lacking:
        return _refused(
            pending,
            f"Error: {call.name} is not permitted for this caller (missing scopes: {', '.join(sorted(lacking))}).",
        )
    try:
        pending.arguments = tool.parse_arguments(call.arguments)
    except ToolArgumentsError as exc:
        return _refused(
            pending,
            f"Error: {exc}. The call was not run. Arguments schema: {json.dumps(tool.parameters)}",
        )
    return pending


def _handoff_arguments_problem(text: str) -> str | None:
    """A handoff takes no arguments (its schema is an empty object with no extra properties): anything else is
    a malformed call, refused like any other rather than dispatched with its arguments ignored."""
    try:
        raw = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        return f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if raw != {}:
        return "a handoff takes no arguments; send {}"
    return None


def _refused(call: PendingCall, text: str) -> PendingCall:
    call.status = CallStatus.DONE
    call.result = text
    call.is_error = True
    return call
