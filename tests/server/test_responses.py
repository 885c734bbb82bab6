"""POST /v1/responses through the official openai client on loopback: the Responses API over the chat path.

The model is tiny and random, so its text is gibberish: the tests compare with the chat endpoint on the same
conversation (greedy text, token counts), check structure (items, events, sequence numbers) and validity
(tool arguments and JSON against their schemas), and that streaming reassembles to the non-streamed response.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from harness import MODEL, WEATHER_PARAMETERS, RunningServer, start_server, start_tool_server

WEATHER_PARAMS = WEATHER_PARAMETERS
ADD_PARAMS = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "minimum": -99, "maximum": 99},
        "b": {"type": "integer", "minimum": -99, "maximum": 99},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": WEATHER_PARAMS,
        "strict": False,
    },
    {"type": "function", "name": "add", "parameters": ADD_PARAMS, "strict": True},
]
CHAT_TOOLS = [
    {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}} for tool in TOOLS
]
SCHEMAS = {"get_weather": WEATHER_PARAMS, "add": ADD_PARAMS}
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "sunny": {"type": "boolean"}},
    "required": ["city", "sunny"],
    "additionalProperties": False,
}
QUESTION = "Weather in Oslo?"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_tool_server(tmp_path_factory.mktemp("tiny-llama-1k"))
    yield running
    running.stop()


def without_ids(response: Any) -> dict[str, Any]:
    """A response as a dict without its random ids, creation time and cached-token count, to compare two runs.

    The second of two equal requests finds the first's prompt in the prefix cache: only the cached count differs.
    """
    data = response.model_dump(exclude_none=True)
    data.pop("id"), data.pop("created_at")
    data["usage"]["input_tokens_details"].pop("cached_tokens")
    for item in data["output"]:
        item.pop("id")
        item.pop("call_id", None)
        item.pop("parsed_arguments", None)  # the stream helper's parse of strict tools' arguments
    return data


def test_text_equals_chat_for_the_same_conversation(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        instructions="Answer briefly.",
        input=QUESTION,
        max_output_tokens=12,
        temperature=0,
        metadata={"case": "text"},
    )
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTION}],
        max_tokens=12,
        temperature=0,
    )
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.model == MODEL and response.metadata == {"case": "text"}
    assert response.instructions == "Answer briefly." and response.max_output_tokens == 12
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert [part.type for part in message.content] == ["output_text"]
    assert response.output_text == chat.choices[0].message.content
    assert response.usage is not None and chat.usage is not None
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    assert response.usage.total_tokens == chat.usage.total_tokens
    assert response.usage.input_tokens_details.cached_tokens >= 0
    finish = chat.choices[0].finish_reason
    assert response.status == ("incomplete" if finish == "length" else "completed")


def test_input_items_render_like_chat_messages(client: openai.OpenAI) -> None:
    items: Any = [
        {"role": "developer", "content": "You are terse."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Hi "}, {"type": "input_text", "text": "there"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
        },
        {"role": "user", "content": QUESTION},
    ]
    messages: Any = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": QUESTION},
    ]
    response = client.responses.create(model=MODEL, input=items, max_output_tokens=6, temperature=0)
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0)
    assert response.usage is not None and chat.usage is not None
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.output_text == chat.choices[0].message.content


def test_max_output_tokens_cut_is_incomplete_streamed_or_not(client: openai.OpenAI) -> None:
    kwargs: Any = {"model": MODEL, "input": QUESTION, "max_output_tokens": 3, "temperature": 0}
    kwargs["extra_body"] = {"ignore_eos": True}
    response = client.responses.create(**kwargs)
    assert response.status == "incomplete"
    assert (
        response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    )
    assert response.usage is not None and response.usage.output_tokens == 3
    assert response.output[-1].status == "incomplete"
    events = list(client.responses.create(stream=True, **kwargs))
    # OpenAI's API ends a stream cut by max_output_tokens with response.incomplete, not response.completed.
    assert events[-1].type == "response.incomplete"
    assert without_ids(events[-1].response) == without_ids(response)


def check_event_stream(events: list[Any]) -> None:
    """Sequence numbers count from 0; every item is added, then done; the response closes last."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert all(
        e.response.id == events[0].response.id
        for e in events
        if e.type.startswith("response.") and hasattr(e, "response")
    )
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    done = [e.output_index for e in events if e.type == "response.output_item.done"]
    assert added == done == list(range(len(events[-1].response.output)))
    for event in events:
        if event.type == "response.output_text.done":
            deltas = [
                e.delta
                for e in events
                if e.type == "response.output_text.delta" and e.item_id == event.item_id
            ]
            assert "".join(deltas) == event.text
        if event.type == "response.function_call_arguments.done":
            pieces = [
                e.delta
                for e in events
                if e.type == "response.function_call_arguments.delta" and e.item_id == event.item_id
            ]
            assert "".join(pieces) == event.arguments


def test_stream_helper_final_response_equals_non_streaming(client: openai.OpenAI) -> None:
    """A JSON schema makes the tiny model stop by itself, so the stream ends with response.completed."""
    kwargs: Any = {
        "model": MODEL,
        "input": QUESTION,
        "max_output_tokens": 60,
        "temperature": 0,
        "text": {"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}},
    }
    response = client.responses.create(**kwargs)
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), SCHEMA)
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=60,
        temperature=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
        },
    )
    assert response.output_text == chat.choices[0].message.content
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    check_event_stream(events)
    assert [e.type for e in events[2:5]] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert without_ids(final) == without_ids(response)
    assert final.id == events[0].response.id
    assert final.text is not None and final.text.format.type == "json_schema"


def test_json_object_format_gives_an_object(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input=QUESTION,
        max_output_tokens=80,
        temperature=1.0,
        text={"format": {"type": "json_object"}},
        extra_body={"seed": 3},
    )
    assert response.status == "completed"
    assert isinstance(json.loads(response.output_text), dict)


def check_call(item: Any, allowed: set[str]) -> None:
    assert item.type == "function_call" and item.call_id.startswith("call_") and item.id.startswith("fc_")
    assert item.name in allowed and item.status == "completed"
    jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_required_tool_choice_gives_a_valid_call_streamed_or_not(client: openai.OpenAI, seed: int) -> None:
    kwargs: Any = {
        "model": MODEL,
        "input": QUESTION,
        "tools": TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_output_tokens": 80,
        "temperature": 1.0,
        "extra_body": {"seed": seed},
    }
    response = client.responses.create(**kwargs)
    assert response.status == "completed" and response.output_text == ""
    [call] = response.output
    check_call(call, {"get_weather", "add"})
    assert response.tool_choice == "required" and [t.name for t in response.tools] == ["get_weather", "add"]
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    check_event_stream(events)
    assert without_ids(final) == without_ids(response)
    assert [e.name for e in events if e.type == "response.function_call_arguments.done"] == [call.name]


def test_tools_beside_a_text_format_give_calls_or_the_answer(client: openai.OpenAI) -> None:
    """What the OpenAI Agents SDK sends for an agent with tools and an output type."""
    kinds = set()
    for seed in range(4):
        response = client.responses.create(
            model=MODEL,
            input=QUESTION,
            tools=TOOLS,
            max_output_tokens=120,
            temperature=1.0,
            text={"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}},
            extra_body={"seed": seed},
        )
        assert response.status == "completed"
        if response.output[0].type == "function_call":
            for item in response.output:
                check_call(item, {"get_weather", "add"})
            kinds.add("calls")
        else:
            jsonschema.validate(json.loads(response.output_text), SCHEMA)
            kinds.add("answer")
    assert "answer" in kinds


def test_named_tool_choice_forces_that_tool(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input=QUESTION,
        tools=TOOLS,
        tool_choice={"type": "function", "name": "add"},
        max_output_tokens=80,
        temperature=1.0,
        extra_body={"seed": 4},
    )
    [call] = response.output
    check_call(call, {"add"})


def test_function_call_output_goes_into_the_prompt(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model=MODEL,
        input=QUESTION,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=80,
        temperature=0,
    )
    [call] = first.output
    assert call.type == "function_call"
    items: Any = [
        {"role": "user", "content": QUESTION},
        call.model_dump(exclude_none=True),  # the output item itself goes back, as the Agents SDK does
        {"type": "function_call_output", "call_id": call.call_id, "output": "12 C and sunny"},
    ]
    follow_up = client.responses.create(
        model=MODEL, input=items, tools=TOOLS, tool_choice="none", max_output_tokens=5, temperature=0
    )
    messages: Any = [
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "12 C and sunny"},
    ]
    chat = client.chat.completions.create(
        model=MODEL, messages=messages, tools=CHAT_TOOLS, tool_choice="none", max_tokens=5, temperature=0
    )
    assert follow_up.usage is not None and chat.usage is not None
    assert follow_up.usage.input_tokens == chat.usage.prompt_tokens
    assert follow_up.output_text == chat.choices[0].message.content
    assert [item.type for item in follow_up.output] == ["message"]
    without_output = client.responses.create(
        model=MODEL, input=items[:2], tools=TOOLS, tool_choice="none", max_output_tokens=1, temperature=0
    )
    assert (
        without_output.usage is not None and without_output.usage.input_tokens < follow_up.usage.input_tokens
    )


def test_disconnect_mid_stream_frees_the_request(server: RunningServer) -> None:
    body = {"model": MODEL, "input": QUESTION, "max_output_tokens": 500, "stream": True}
    body["ignore_eos"] = True
    with (
        httpx.Client(base_url=server.base_url, timeout=30) as http,
        http.stream("POST", "/v1/responses", json=body) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        assert next(lines) == "event: response.created"
        for line in lines:
            if line == "event: response.output_text.delta":
                break
    assert server.wait_for_free_blocks() == 0


ERRORS: list[tuple[dict[str, Any], str, str]] = [
    ({"input": 5}, "input", "string or a non-empty list"),
    ({"input": []}, "input", "non-empty list"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "role must be one of"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
        "input[0].content[0].type",
        "input_image",
    ),
    (
        {"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]},
        "input[0].call_id",
        "answers no function_call",
    ),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "add"}]}, "input[0].arguments", "string"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "not supported"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "only function tools"),
    ({"tools": [TOOLS[1], TOOLS[1]]}, "tools", "duplicate tool name"),
    ({"tools": [{"type": "function", "name": "bad name!"}]}, "tools", "tools[0].name must be"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice", "not in tools"),
    ({"tool_choice": "required"}, "tool_choice", "needs at least one tool"),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", "name is required"),
    (
        {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "strnig"}}}},
        "text.format",
        "invalid JSON schema",
    ),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type", "text.format.type must be"),
    (
        {"tools": TOOLS, "tool_choice": "required", "text": {"format": {"type": "json_object"}}},
        "text.format",
        "text.format cannot be combined with tool_choice 'required'",
    ),
    ({"store": True}, "store", "keeps no response state"),
    ({"previous_response_id": "resp_123"}, "previous_response_id", "keeps no response state"),
    ({"max_output_tokens": 0}, "max_output_tokens", "max_output_tokens must be"),
    ({"max_output_tokens": 5000}, "max_output_tokens", "exceeds the maximum context length"),
    ({"temperature": "hot"}, "temperature", "valid number"),
]


@pytest.mark.parametrize(("fields", "param", "message"), ERRORS)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_requests_get_400_naming_the_field(
    server: RunningServer, fields: dict[str, Any], param: str, message: str, stream: bool
) -> None:
    body = {"model": MODEL, "input": QUESTION, "max_output_tokens": 4, "stream": stream, **fields}
    response = server.http().post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
    assert message in error["message"], error


def test_bad_request_raises_in_the_openai_client(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input=QUESTION, store=True)
    assert isinstance(info.value.body, dict) and info.value.body["param"] == "store"


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="no-such-model", input=QUESTION)
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "model_not_found"


def test_api_key_is_required(tiny_model_dir: Path) -> None:
    running = start_server(tiny_model_dir, api_key="secret")
    try:
        with pytest.raises(openai.AuthenticationError):
            running.client(api_key="wrong").responses.create(model=MODEL, input="hi", max_output_tokens=2)
        response = running.client(api_key="secret").responses.create(
            model=MODEL, input="hi", max_output_tokens=2
        )
        assert response.usage is not None and response.usage.output_tokens <= 2
    finally:
        running.stop()


def test_timeout_mid_stream_raises_in_the_client(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chat path's timeout error event reaches the Responses stream, and the request's blocks are freed."""
    running = start_server(tiny_model_dir, request_timeout=0.15)
    try:
        engine = running.llm_engine
        real_step = engine.step

        def slow_step() -> list:  # type: ignore[type-arg]
            time.sleep(0.005)  # 200 tokens then take at least a second, far past the timeout
            return real_step()

        monkeypatch.setattr(engine, "step", slow_step)
        client = running.client()
        kwargs: Any = {
            "model": MODEL,
            "input": "hi",
            "max_output_tokens": 200,
            "extra_body": {"ignore_eos": True},
        }
        with pytest.raises(openai.APIStatusError) as info:
            client.responses.create(**kwargs)
        assert info.value.status_code == 504 and info.value.code == "request_timeout"
        seen = []
        with pytest.raises(openai.APIError, match="did not finish within"):
            for event in client.responses.create(stream=True, **kwargs):
                seen.append(event.type)
        assert seen[:2] == ["response.created", "response.in_progress"]
        assert "response.completed" not in seen and "response.incomplete" not in seen
        assert running.wait_for_free_blocks() == 0
    finally:
        running.stop()


def test_async_client_streams_too(server: RunningServer) -> None:
    kwargs: Any = {"model": MODEL, "input": QUESTION, "max_output_tokens": 5, "temperature": 0}

    async def both() -> tuple[str, str]:
        client = server.async_client()
        response = await client.responses.create(**kwargs)
        async with client.responses.stream(**kwargs) as stream:
            texts = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        return response.output_text, "".join(texts)

    whole, streamed = asyncio.run(both())
    assert streamed == whole
