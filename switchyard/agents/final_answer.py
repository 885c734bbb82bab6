"""Structured final answers: an agent with an `output_type` ends its run through a `final_answer` tool call
whose arguments are the answer, or through a text reply that parses as the type.

Tool arguments must be a JSON object, so an output type that is not one travels wrapped as `{"value": ...}`.

A turn with a valid `final_answer` call ends the run with that answer (then output guardrails), whatever else
the turn called: its other calls, valid or not (handoffs included), are never run and get no result, and the
first valid `final_answer` of the turn is the one taken. An invalid `final_answer` is a bad call like any other:
it gets an error result and the turn's other calls are resolved as usual.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic

from switchyard.agents.agent import Agent
from switchyard.agents.state import PendingCall
from switchyard.agents.tool import validation_problems

FINAL_ANSWER_TOOL = "final_answer"


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


def final_from_tool(agent: Agent, calls: list[PendingCall]) -> tuple[Any] | None:
    """(the answer,) from the turn's first valid `final_answer` call, or None when it made none; `calls` are
    validated (`call_validation.validate_call`), so an invalid one already carries its error."""
    if agent.output_type is None:
        return None
    for call in calls:
        if call.name == FINAL_ANSWER_TOOL and not call.is_error:
            value = call.arguments
            if is_wrapped(agent.output_type):
                value = value["value"]
            return (value,)
    return None


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
