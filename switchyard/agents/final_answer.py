"""Structured final answers: an agent with an `output_type` ends its run through a `final_answer` tool call
whose arguments are the answer, or through a text reply that parses as the type.

Tool arguments must be a JSON object, so an output type that is not one travels wrapped as `{"value": ...}`.

A turn with a valid `final_answer` call ends the run with that answer (then output guardrails), whatever else
the turn called: its other calls, valid or not (handoffs included), are never run and get no result, and the
first valid `final_answer` of the turn is the one taken. An invalid `final_answer` is a bad call like any other:
it gets an error result and the turn's other calls are resolved as usual.

The turn that gives a final answer through a call still gets a tool reply for every call it made (the answer
received or blocked, the others not run): a transcript whose assistant `tool_calls` lack replies is rejected
when replayed to OpenAI-style APIs, and a session continues from it. These replies are the runner's own fixed
text, so they do not taint the session the way tool results do (`is_runner_reply`).
"""

from __future__ import annotations

import json
from typing import Any

import pydantic

from switchyard.agents.agent import Agent
from switchyard.agents.state import PendingCall
from switchyard.agents.tool import validation_problems
from switchyard.agents.transcript import STOPPED_BEFORE_RUN

FINAL_ANSWER_TOOL = "final_answer"
ANSWER_RECEIVED = "Final answer received."
ANSWER_BLOCKED = "Final answer not accepted: an output guardrail blocked it."
NOT_RUN = "Not run: this turn gave the final answer."
_RUNNER_REPLIES = frozenset({ANSWER_RECEIVED, ANSWER_BLOCKED, NOT_RUN, STOPPED_BEFORE_RUN})


def is_wrapped(output_type: type[Any]) -> bool:
    """Tool arguments must be an object: other output types travel as {"value": ...}."""
    return pydantic.TypeAdapter(output_type).json_schema().get("type") != "object"


def final_adapter(output_type: type[Any]) -> pydantic.TypeAdapter[Any]:
    """Validates the `final_answer` tool's arguments (wrapped when the type is not an object)."""
    if is_wrapped(output_type):
        return pydantic.TypeAdapter(
            pydantic.create_model(
                "final_answer", __config__=pydantic.ConfigDict(extra="forbid"), value=(output_type, ...)
            )
        )
    return pydantic.TypeAdapter(output_type)


def final_answer_spec(output_type: type[Any]) -> dict[str, Any]:
    """The OpenAI `tools` entry of the `final_answer` tool."""
    schema = final_adapter(output_type).json_schema()
    schema.setdefault("additionalProperties", False)
    return {
        "type": "function",
        "function": {
            "name": FINAL_ANSWER_TOOL,
            "description": "Give the final answer.",
            "parameters": schema,
        },
    }


def final_call(agent: Agent, calls: list[PendingCall]) -> PendingCall | None:
    """The turn's first valid `final_answer` call; `calls` are validated (`call_validation.validate_call`), so
    an invalid one already carries its error."""
    if agent.output_type is None:
        return None
    return next((c for c in calls if c.name == FINAL_ANSWER_TOOL and not c.is_error), None)


def final_from_tool(agent: Agent, call: PendingCall | None) -> tuple[Any] | None:
    """(the answer,) from the turn's `final_call`, or None when it made none."""
    if call is None or agent.output_type is None:
        return None
    value = call.arguments
    if is_wrapped(agent.output_type):
        value = value["value"]
    return (value,)


def closing_replies(calls: list[PendingCall], final: PendingCall, accepted: bool) -> list[dict[str, Any]]:
    """A tool reply for each call of the turn that gave the final answer."""
    answer = ANSWER_RECEIVED if accepted else ANSWER_BLOCKED
    return [
        {"role": "tool", "tool_call_id": c.call_id, "content": answer if c is final else NOT_RUN}
        for c in calls
    ]


def is_runner_reply(message: dict[str, Any]) -> bool:
    """A tool message the runner wrote itself (`closing_replies`, `transcript.answer_unreplied_calls`), not a
    tool's result."""
    return message.get("role") == "tool" and message.get("content") in _RUNNER_REPLIES


def final_from_text(agent: Agent, text: str) -> tuple[tuple[Any] | None, str | None]:
    """(final output, None) or (None, the problem to tell the model)."""
    if agent.output_type is None:
        return (text,), None
    adapter = pydantic.TypeAdapter(agent.output_type)
    try:
        return (adapter.dump_python(adapter.validate_json(text), mode="json"),), None
    except pydantic.ValidationError as exc:
        schema = final_answer_spec(agent.output_type)["function"]["parameters"]
        return None, (
            f"Your final answer must be JSON matching this schema (or a {FINAL_ANSWER_TOOL} call): "
            f"{json.dumps(schema)}. Problem: {validation_problems(exc)}"
        )
