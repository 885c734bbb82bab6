"""response_format, vLLM's structured-output extras and tool calls through the openai client, on loopback."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import jsonschema
import openai
import pytest
from harness import MODEL, WEATHER_PARAMETERS, RunningServer, metric, start_tool_server

from switchyard.server.chat_reply import finish_reason_of
from switchyard.tool_calling import ToolCall

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "temperature": {"type": "number"},
        "sunny": {"type": "boolean"},
    },
    "required": ["city", "temperature", "sunny"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Weather in Oslo as JSON?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": WEATHER_PARAMETERS,
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "strict": True,  # OpenAI's strict: no properties beyond those named, though the schema does not say so
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": -99, "maximum": 99},
                "b": {"type": "integer", "minimum": -99, "maximum": 99},
            },
            "required": ["a", "b"],
        },
    },
}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_tool_server(tmp_path_factory.mktemp("tiny-llama-1k"))
    yield running
    running.stop()


def tool_call_token(server: RunningServer) -> int:
    return int(server.llm_engine.tokenizer.convert_tokens_to_ids("<tool_call>"))


def check_calls(calls: list, allowed: set[str]) -> None:  # type: ignore[type-arg]
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_response_format(client: openai.OpenAI, temperature: float) -> None:
    response = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        temperature=temperature,
        seed=1,
        max_tokens=120,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
        },
    )
    choice = response.choices[0]
    if choice.finish_reason == "stop":
        jsonschema.validate(json.loads(choice.message.content or ""), SCHEMA)
    else:
        assert choice.finish_reason == "length"


def test_json_schema_streamed_equals_parsed(client: openai.OpenAI) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
    chunks = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        temperature=1.0,
        seed=4,
        max_tokens=120,
        response_format=fmt,
        stream=True,
    )
    text, finish = "", None
    for chunk in chunks:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    if finish == "stop":
        jsonschema.validate(json.loads(text), SCHEMA)


def test_json_object_and_vllm_extras(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=60,
        temperature=1.0,
        seed=2,
        response_format={"type": "json_object"},
    )
    if response.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(response.choices[0].message.content or ""), dict)
    choice = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=10, extra_body={"guided_choice": ["sunny", "rainy"]}
    )
    assert choice.choices[0].message.content in ("sunny", "rainy")
    completion = client.completions.create(
        model=MODEL,
        prompt="Code:",
        max_tokens=10,
        extra_body={"structured_outputs": {"regex": "[A-Z]{3}-[0-9]{2}"}},
    )
    assert re.fullmatch(r"[A-Z]{3}-[0-9]{2}", completion.choices[0].text)
    grammar = client.completions.create(
        model=MODEL, prompt="List:", max_tokens=30, extra_body={"guided_grammar": 'root ::= "[" [a-c]+ "]"'}
    )
    text = grammar.choices[0].text
    assert re.fullmatch(r"\[[a-c]+\]", text) or grammar.choices[0].finish_reason == "length"


def streamed_calls(chunks) -> tuple[dict[int, dict[str, str]], str | None]:  # type: ignore[no-untyped-def]
    """Reassemble OpenAI-style `delta.tool_calls` pieces: id and name first, then argument fragments."""
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in chunks:
        if not chunk.choices:
            continue
        assert chunk.choices[0].delta.content in (None, "")
        finish = chunk.choices[0].finish_reason or finish
        for piece in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            if piece.id:
                assert not entry["id"] and piece.function.name
                entry["id"], entry["name"] = piece.id, piece.function.name
            entry["arguments"] += piece.function.arguments or ""
    return calls, finish


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_choice_gives_one_valid_call(client: openai.OpenAI, stream: bool) -> None:
    kwargs = {
        "model": MODEL,
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": 80,
        "temperature": 1.0,
    }
    for seed in range(3):
        if not stream:
            choice = client.chat.completions.create(seed=seed, **kwargs).choices[0]  # type: ignore[call-overload]
            assert choice.finish_reason == "tool_calls" and not choice.message.content
            check_calls(choice.message.tool_calls or [], {"get_weather", "add"})
            assert len(choice.message.tool_calls or []) == 1
            continue
        calls, finish = streamed_calls(client.chat.completions.create(seed=seed, stream=True, **kwargs))  # type: ignore[call-overload]
        assert finish == "tool_calls" and len(calls) == 1
        for entry in calls.values():
            assert entry["id"].startswith("call_")
            jsonschema.validate(json.loads(entry["arguments"]), SCHEMAS[entry["name"]])


def test_parallel_calls_are_each_valid(server: RunningServer, client: openai.OpenAI) -> None:
    newline = server.llm_engine.tokenizer.encode("\n", add_special_tokens=False)
    kwargs = {
        "model": MODEL,
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": 200,
        "logit_bias": {
            str(newline[0]): 5
        },  # favour the separator over EOS after a call: more calls per reply
    }
    seen_many = False
    for seed in range(4):
        response = client.chat.completions.create(temperature=1.0, seed=seed, **kwargs)  # type: ignore[call-overload]
        choice = response.choices[0]
        calls = choice.message.tool_calls or []
        assert choice.finish_reason in ("tool_calls", "length")
        # At max_tokens the last call may be cut off (finish_reason "length" says so); all others are whole.
        check_calls(calls if choice.finish_reason == "tool_calls" else calls[:-1], {"get_weather", "add"})
        seen_many |= len(calls) > 1
        streamed, finish = streamed_calls(
            client.chat.completions.create(temperature=1.0, seed=seed, stream=True, **kwargs)  # type: ignore[call-overload]
        )
        assert finish == choice.finish_reason
        assert [c["name"] for c in streamed.values()] == [c.function.name for c in calls]
        assert [c["arguments"] for c in streamed.values()] == [c.function.arguments for c in calls]
    assert seen_many


def test_named_tool_choice_forces_that_tool(client: openai.OpenAI) -> None:
    for seed in range(3):
        choice = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "add"}},
            temperature=1.0,
            seed=seed,
            max_tokens=80,
        ).choices[0]
        assert choice.finish_reason == "tool_calls"
        check_calls(choice.message.tool_calls or [], {"add"})
        assert len(choice.message.tool_calls or []) == 1


def test_auto_once_a_call_starts_the_rest_is_constrained(
    server: RunningServer, client: openai.OpenAI
) -> None:
    """A random model rarely starts a call by itself, so a logit bias makes it write `<tool_call>`."""
    bias = {str(tool_call_token(server)): 100}
    choice = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=TOOLS,
        temperature=1.0,
        seed=5,
        max_tokens=80,
        logit_bias=bias,  # type: ignore[arg-type]
        parallel_tool_calls=False,
    ).choices[0]
    assert choice.finish_reason == "tool_calls"
    check_calls(choice.message.tool_calls or [], {"get_weather", "add"})
    assert len(choice.message.tool_calls or []) == 1  # parallel_tool_calls=False stops after the first


@pytest.mark.parametrize("bias_to_call", [False, True])
def test_auto_with_a_response_format_gives_calls_or_the_answer(
    server: RunningServer, client: openai.OpenAI, bias_to_call: bool
) -> None:
    """An agent with an output type sends tools and a response format together (the OpenAI Agents SDK does):
    each reply is then either tool calls or JSON matching the format, never free text or a mix."""
    bias = {str(tool_call_token(server)): 100} if bias_to_call else None
    kinds = set()
    for seed in range(4):
        choice = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            tools=TOOLS,
            temperature=1.0,
            seed=seed,
            max_tokens=200,
            logit_bias=bias,  # type: ignore[arg-type]
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
            },
        ).choices[0]
        assert choice.finish_reason in ("stop", "tool_calls"), choice
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls" and not choice.message.content
            check_calls(choice.message.tool_calls, {"get_weather", "add"})
            kinds.add("calls")
        else:
            jsonschema.validate(json.loads(choice.message.content or ""), SCHEMA)
            kinds.add("answer")
    if bias_to_call:
        assert kinds == {"calls"}
    else:
        assert "answer" in kinds  # unbiased, the random model opens with "{" for some seeds


def test_auto_without_a_call_is_plain_text(client: openai.OpenAI) -> None:
    choice = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, temperature=0, max_tokens=8
    ).choices[0]
    assert choice.finish_reason in ("length", "stop") and not choice.message.tool_calls


def test_tool_results_go_back_into_the_conversation(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=80, temperature=0
    ).choices[0]
    calls = first.message.tool_calls or []
    assert calls
    messages = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
        *({"role": "tool", "tool_call_id": c.id, "content": "12 C"} for c in calls),
    ]
    follow_up = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, tool_choice="none", max_tokens=5, temperature=0
    )
    assert follow_up.choices[0].message.tool_calls is None


@pytest.mark.parametrize(
    ("kwargs", "param", "message"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "strnig"}},
                }
            },
            "response_format",
            "invalid JSON schema",
        ),
        ({"response_format": {"type": "xml"}}, "response_format", "response_format.type"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "a b!", "schema": {}}}},
            "response_format",
            "letters, digits, underscores or dashes",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
            "response_format",
            "name",
        ),
        ({"tools": [ADD, ADD]}, "tools", "duplicate tool name"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "not in tools",
        ),
        ({"tool_choice": "required"}, "tool_choice", "needs at least one tool"),
        (
            {"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
            "response_format",
            "cannot be combined",
        ),
        ({"extra_body": {"guided_regex": "(unclosed"}}, "guided_regex", "regex"),
        (  # xgrammar's converter refuses it outside the compile pool: was a 500
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {
                                "properties": {"a": {"type": "string", "minLength": 9, "maxLength": 1}}
                            },
                        },
                    }
                ],
                "tool_choice": "required",
            },
            "tools",
            "minLength 9 is greater than maxLength 1",
        ),
        (
            {
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
                "stop": ["}"],
            },
            "stop",
            "cut the constrained output",
        ),
        (
            {"tools": TOOLS, "tool_choice": "required", "extra_body": {"stop_token_ids": [3]}},
            "stop_token_ids",
            "cut the constrained output",
        ),
        (  # the grammar's end would be forbidden: was a 500 ("sampled token violates the request's grammar")
            {"response_format": {"type": "json_object"}, "extra_body": {"min_tokens": 2}},
            "min_tokens",
            "the grammar decides where the reply ends",
        ),
        ({"extra_body": {"guided_regex": "a", "guided_choice": ["b"]}}, "guided_choice", "at most one"),
    ],
)
def test_bad_structured_requests_get_400(
    client: openai.OpenAI, kwargs: dict, param: str, message: str
) -> None:  # type: ignore[type-arg]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, **kwargs)
    body = info.value.body
    assert isinstance(body, dict) and body.get("param") == param, body
    assert message in body["message"]


def test_auto_tool_calls_may_still_stop_on_a_stop_string(client: openai.OpenAI) -> None:
    """tool_choice "auto" keeps stop strings for its free text; only whole-reply constraints refuse them."""
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="auto", stop=["\n\n"], max_tokens=4
    )
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize(
    ("arguments", "expected"), [('{"a": 1}', "tool_calls"), ('{"a": "cut by a st', "stop"), ("", "stop")]
)
def test_a_call_cut_by_a_stop_string_does_not_finish_with_tool_calls(arguments: str, expected: str) -> None:
    call = ToolCall(id="call_1", name="add", arguments=arguments, complete=False)
    assert finish_reason_of("stop", [call]) == expected
    assert finish_reason_of("length", [call]) == "length"
    assert finish_reason_of("stop", []) == "stop"


def test_grammar_work_shows_in_metrics(server: RunningServer, client: openai.OpenAI) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "metrics_probe", "schema": {"type": "boolean"}}}
    for _ in range(2):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, response_format=fmt)
    text = server.http().get("/metrics").text
    assert metric(text, "switchyard:structured_output_events_total", event="compiled") >= 1
    assert metric(text, "switchyard:structured_output_events_total", event="cache_hit") >= 1
    assert 'event="rejected_token"' not in text  # the grammar never refused a sampled token
    assert metric(text, "switchyard:structured_output_seconds_total", phase="mask") > 0
