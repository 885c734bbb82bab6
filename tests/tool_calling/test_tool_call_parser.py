"""The tool-call parser: whole replies and streams read the same, whatever the chunking."""

from __future__ import annotations

import json

import pytest

from switchyard.cli import TOOL_CALL_FORMATS
from switchyard.errors import InvalidRequestError
from switchyard.tool_calling import (
    detect_format,
    get_format,
    parse_tool_choice,
    parse_tools,
    registered_formats,
)
from switchyard.tool_calling.format import ArgumentsDelta, CallStarted, ContentDelta, JsonValueScanner

HERMES = get_format("hermes")
TRICKY = (
    'Let me check.\n<tool_call>\n{"name": "search", "arguments": {"query": "a </tool_call> b \\" }", '
    '"nested": [1, {"x": "]}"}]}}\n</tool_call>\n<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>'
)


def test_a_closing_tag_inside_a_string_does_not_end_the_call() -> None:
    parsed = HERMES.parse(TRICKY)
    assert parsed.content == "Let me check."
    assert [c.name for c in parsed.tool_calls] == ["search", "noop"]
    arguments = json.loads(parsed.tool_calls[0].arguments)
    assert arguments == {"query": 'a </tool_call> b " }', "nested": [1, {"x": "]}"}]}
    assert all(c.complete for c in parsed.tool_calls)
    assert len({c.id for c in parsed.tool_calls}) == 2


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1000])
def test_streaming_in_any_chunks_equals_the_whole_parse(chunk: int) -> None:
    parser = HERMES.parser()
    events = []
    for start in range(0, len(TRICKY), chunk):
        events += parser.feed(TRICKY[start : start + chunk])
    events += parser.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    starts = [e for e in events if isinstance(e, CallStarted)]
    arguments = [
        "".join(e.text for e in events if isinstance(e, ArgumentsDelta) and e.index == i) for i in range(2)
    ]
    whole = HERMES.parse(TRICKY)
    assert content.strip() == whole.content
    assert [s.name for s in starts] == ["search", "noop"] and [s.index for s in starts] == [0, 1]
    assert arguments == [c.arguments for c in whole.tool_calls]


def test_a_partial_trigger_is_held_back_then_released_as_text() -> None:
    parser = HERMES.parser()
    assert [e.text for e in parser.feed("a <tool_")] == ["a "]  # type: ignore[union-attr]
    assert [e.text for e in parser.feed("x")] == ["<tool_x"]  # type: ignore[union-attr]
    parser = HERMES.parser()
    parser.feed("ends with <tool_c")
    assert [e.text for e in parser.finish()] == ["<tool_c"]  # type: ignore[union-attr]
    assert HERMES.parse("cut at max_tokens <tool_c", truncated=True).content == "cut at max_tokens"


def test_text_that_is_not_a_call_stays_content() -> None:
    parsed = HERMES.parse("use <tool_call> like this: it is a tag")
    assert parsed.tool_calls == [] and parsed.content == "use <tool_call> like this: it is a tag"


def test_a_call_cut_off_in_its_header_is_dropped() -> None:
    parsed = HERMES.parse('Sure.\n<tool_call>\n{"name": "get_wea')
    assert parsed.content == "Sure." and parsed.tool_calls == []


def test_a_truncated_call_is_reported_incomplete() -> None:
    parsed = HERMES.parse('<tool_call>\n{"name": "f", "arguments": {"a": "unfinis')
    [call] = parsed.tool_calls
    assert call.name == "f" and not call.complete and call.arguments == '{"a": "unfinis'


def test_llama3_json_format() -> None:
    llama = get_format("llama3_json")
    parsed = llama.parse('{"name": "get_weather", "parameters": {"city": "Oslo"}}')
    [call] = parsed.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}
    assert parsed.content is None


def test_formats_are_detected_from_the_chat_template() -> None:
    assert detect_format("... <tool_call> ...").name == "hermes"
    assert detect_format("{{ '<|python_tag|>' }}").name == "llama3_json"
    assert detect_format(None).name == "hermes"
    assert tuple(registered_formats()) == TOOL_CALL_FORMATS
    with pytest.raises(ValueError, match="unknown tool-call format"):
        get_format("nope")


def test_json_value_scanner_finds_the_end_of_scalars_and_containers() -> None:
    for text, end in [('{"a": "}"} tail', 10), ("[1, [2]]x", 8), ('"q\\"x" rest', 6), ("123}", 3)]:
        scanner = JsonValueScanner()
        assert scanner.feed(text) == end and scanner.done


def test_tool_validation_errors() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(InvalidRequestError, match="duplicate tool name"):
        parse_tools([tool, tool])
    with pytest.raises(InvalidRequestError, match="letters, digits"):
        parse_tools([{"type": "function", "function": {"name": "has space"}}])
    with pytest.raises(InvalidRequestError, match="invalid JSON schema"):
        parse_tools([{"type": "function", "function": {"name": "g", "parameters": {"type": "objekt"}}}])
    with pytest.raises(InvalidRequestError, match="object schema"):
        parse_tools([{"type": "function", "function": {"name": "g", "parameters": {"type": "string"}}}])
    tools = parse_tools([tool])
    with pytest.raises(InvalidRequestError, match="not in tools"):
        parse_tool_choice({"type": "function", "function": {"name": "other"}}, tools)
    with pytest.raises(InvalidRequestError, match="needs at least one tool"):
        parse_tool_choice("required", [])
    with pytest.raises(InvalidRequestError, match="tool_choice must be"):
        parse_tool_choice("sometimes", tools)
    assert parse_tool_choice(None, tools).mode == "auto" and parse_tool_choice(None, []).mode == "none"


def test_a_name_with_a_broken_escape_is_text_not_a_crash() -> None:
    text = '<tool_call>\n{"name": "get\\x", "arguments": {}}\n</tool_call>'
    for chunk in (1, len(text)):
        parser = HERMES.parser()
        events = [e for start in range(0, len(text), chunk) for e in parser.feed(text[start : start + chunk])]
        events += parser.finish()
        assert parser.calls == []
        assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == text


def streamed(fmt_name: str, text: str, chunk: int) -> tuple[str, list[tuple[str, str, bool]]]:
    """Content and (name, arguments, complete) per call, from `text` fed `chunk` characters at a time."""
    parser = get_format(fmt_name).parser()
    events = []
    for start in range(0, len(text), chunk):
        events += parser.feed(text[start : start + chunk])
    events += parser.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return content, [(c.name, c.arguments, c.complete) for c in parser.calls]


@pytest.mark.parametrize("chunk", [1, 2, 5, 1000])
def test_llama3_parallel_calls_stream_without_their_separator_as_content(chunk: int) -> None:
    """The grammar writes `}; {"name"...` between calls: the `;` closes a call, it is not reply text."""
    text = '{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}}'
    content, calls = streamed("llama3_json", text, chunk)
    assert content == ""
    assert calls == [("f", '{"a": 1}', True), ("g", "{}", True)]


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_a_closing_tag_cut_short_is_neither_content_nor_a_complete_call(chunk: int) -> None:
    content, calls = streamed("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_', chunk)
    assert content == "" and calls == [("f", '{"a": 1}', False)]
