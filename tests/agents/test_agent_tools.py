"""@tool: schemas from signatures and docstrings, strict validation, sync and async calls, timeouts."""

from __future__ import annotations

import asyncio
import time
from typing import Literal

import pytest

from switchyard.agents import SideEffects, ToolContext, tool
from switchyard.agents.tool import ToolArgumentsError, ToolTimeoutError

CONTEXT = ToolContext("run", "run:1:call", "tester", frozenset())


@tool
def convert(value: float, unit: Literal["km", "mi"] = "km") -> dict[str, float]:
    """Convert a distance.

    Args:
        value: The distance to convert.
        unit: The unit of `value`;
            the other unit is the target.
    """
    return {"value": value * (0.621 if unit == "km" else 1.609)}


def test_schema_comes_from_signature_and_docstring() -> None:
    spec = convert.spec()["function"]
    assert spec["name"] == "convert" and spec["description"] == "Convert a distance."
    schema = spec["parameters"]
    assert schema["additionalProperties"] is False and schema["required"] == ["value"]
    assert schema["properties"]["value"] == {"type": "number", "description": "The distance to convert."}
    assert schema["properties"]["unit"]["enum"] == ["km", "mi"]
    assert "the other unit is the target" in schema["properties"]["unit"]["description"]
    assert "title" not in schema


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"unit": "km"}', "value: Field required"),
        ('{"value": 1, "unit": "ft"}', "unit"),
        ('{"value": 1, "extra": true}', "extra: Extra inputs are not permitted"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(text: str, problem: str) -> None:
    with pytest.raises(ToolArgumentsError, match=problem):
        convert.parse_arguments(text)


def test_sync_and_async_tools_run_and_get_context() -> None:
    seen: list[str] = []

    @tool(side_effects="acting", idempotent=True, scopes={"mail"})
    async def send(to: str, context: ToolContext) -> str:
        """Send a note."""
        seen.append(context.idempotency_key)
        return f"sent to {to}"

    assert "context" not in send.parameters["properties"]
    assert send.side_effects is SideEffects.ACTING and send.scopes == {"mail"}
    assert asyncio.run(send.invoke({"to": "ana"}, CONTEXT)) == "sent to ana"
    assert seen == ["run:1:call"]
    assert asyncio.run(convert.invoke(convert.parse_arguments('{"value": 10}'), CONTEXT)) == '{"value": 6.21}'


def test_timeout_and_approval_predicate() -> None:
    @tool(timeout=0.05, needs_approval=lambda args: args["seconds"] > 1)
    def sleepy(seconds: float) -> str:
        """Sleep a little."""
        time.sleep(seconds)
        return "done"

    assert sleepy.approval_required({"seconds": 5}) and not sleepy.approval_required({"seconds": 0.1})
    with pytest.raises(ToolTimeoutError, match=r"sleepy timed out after 0\.05 s"):
        asyncio.run(sleepy.invoke({"seconds": 0.2}, CONTEXT))


def test_a_tools_own_timeout_error_is_a_failure_not_a_timeout() -> None:
    @tool(timeout=5)
    async def flaky() -> str:
        """Its own network call timed out."""
        raise TimeoutError("upstream")

    with pytest.raises(TimeoutError, match="upstream") as caught:
        asyncio.run(flaky.invoke({}, CONTEXT))
    assert not isinstance(caught.value, ToolTimeoutError)
