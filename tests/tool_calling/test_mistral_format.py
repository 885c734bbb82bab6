"""Mistral's tool-call format: a JSON list of calls after [TOOL_CALLS], nine-character call ids."""

from __future__ import annotations

import json

import pytest

from switchyard.tool_calling import detect_format, get_format
from switchyard.tool_calling.format import ArgumentsDelta, CallStarted, ContentDelta
from switchyard.tool_calling.mistral import mistral_template_call_id

MISTRAL = get_format("mistral")
TWO_CALLS = (
    '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "note": "}, {\\"name\\": ]"}}, '
    '{"name": "get_time", "arguments": {}}]'
)


def test_a_list_of_calls_is_read_whole() -> None:
    parsed = MISTRAL.parse(TWO_CALLS)
    assert parsed.content is None
    assert [c.name for c in parsed.tool_calls] == ["get_weather", "get_time"]
    assert json.loads(parsed.tool_calls[0].arguments) == {"city": "Paris", "note": '}, {"name": ]'}
    assert json.loads(parsed.tool_calls[1].arguments) == {}
    assert all(c.complete for c in parsed.tool_calls)
    for call in parsed.tool_calls:  # what Mistral's chat templates accept back
        assert len(call.id) == 9 and call.id.isalnum()


@pytest.mark.parametrize("chunk", [1, 2, 5, 13, 1000])
def test_streaming_in_any_chunks_equals_the_whole_parse(chunk: int) -> None:
    text = "Checking. " + TWO_CALLS
    parser = MISTRAL.parser()
    events = []
    for start in range(0, len(text), chunk):
        events += parser.feed(text[start : start + chunk])
    events += parser.finish()
    whole = MISTRAL.parse(text)
    assert (
        "".join(e.text for e in events if isinstance(e, ContentDelta)).strip() == whole.content == "Checking."
    )
    assert [e.name for e in events if isinstance(e, CallStarted)] == ["get_weather", "get_time"]
    for index, call in enumerate(whole.tool_calls):
        pieces = [e.text for e in events if isinstance(e, ArgumentsDelta) and e.index == index]
        assert "".join(pieces) == call.arguments


def test_one_list_per_trigger_and_cut_lists() -> None:
    separate = MISTRAL.parse(
        '[TOOL_CALLS] [{"name": "a", "arguments": {}}][TOOL_CALLS] [{"name": "b", "arguments": {"x": 1}}]'
    )
    assert [c.name for c in separate.tool_calls] == ["a", "b"] and all(
        c.complete for c in separate.tool_calls
    )
    # Cut by max_tokens inside the second call's name: the first call stands, the second names nothing.
    cut = MISTRAL.parse('[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"na', truncated=True)
    assert [(c.name, c.complete) for c in cut.tool_calls] == [("a", True)] and cut.content is None
    # Cut inside the first call's arguments: the call is there, not complete.
    inside = MISTRAL.parse('[TOOL_CALLS] [{"name": "a", "arguments": {"x": ', truncated=True)
    assert [(c.name, c.complete) for c in inside.tool_calls] == [("a", False)]


def test_text_that_only_looks_like_a_call() -> None:
    parsed = MISTRAL.parse("Use [TOOL_CALLS] to call tools.")
    assert parsed.content == "Use [TOOL_CALLS] to call tools." and parsed.tool_calls == []


def test_template_call_ids() -> None:
    assert mistral_template_call_id("abcDEF123") == "abcDEF123"  # already what the template wants
    rewritten = mistral_template_call_id("call_0123456789abcdef01234567")
    assert len(rewritten) == 9 and rewritten.isalnum()
    assert rewritten == mistral_template_call_id(
        "call_0123456789abcdef01234567"
    )  # stable: calls and results match
    assert rewritten != mistral_template_call_id("call_0123456789abcdef01234568")


def test_detected_from_a_mistral_template() -> None:
    template = "{%- if message.tool_calls %}[TOOL_CALLS] [{{ calls | tojson }}]{%- endif %}"
    assert detect_format(template).name == "mistral"
