"""Reasoning models over the chat API: `--reasoning-parser` moves <think> text to `message.reasoning` (and
`reasoning_content`), plain and streamed; `chat_template_kwargs`, `continue_final_message` and
`add_generation_prompt` reach the chat template. The model is the tiny one with a Qwen3-style template."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import MODEL, RunningServer, start_server, thinking_template, with_template
from transformers import AutoTokenizer

from switchyard.cli import REASONING_PARSERS as CLI_PARSERS
from switchyard.reasoning import REASONING_PARSERS, split_reasoning

USER = [{"role": "user", "content": "What is 2 + 2?"}]
GREEDY: dict[str, Any] = {"model": MODEL, "max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def thinking_model(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return with_template(tiny_model_dir, tmp_path_factory.mktemp("thinking"), thinking_template())


@pytest.fixture(scope="module")
def r1_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Every reply starts inside its reasoning, as with DeepSeek-R1: what the Responses API tests need, whose
    requests carry no template variables."""
    folder = with_template(
        tiny_model_dir, tmp_path_factory.mktemp("r1"), thinking_template(open_by_default=True)
    )
    running = start_server(folder, reasoning_parser="deepseek_r1")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def reasoning_server(thinking_model: Path) -> Iterator[RunningServer]:
    running = start_server(thinking_model, reasoning_parser="qwen3")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def plain_server(thinking_model: Path) -> Iterator[RunningServer]:
    running = start_server(thinking_model)
    yield running
    running.stop()


def raw_reply(server: RunningServer, model_dir: Path, messages: list[dict[str, Any]], **template: Any) -> str:
    """The greedy reply's whole text, from /v1/completions on the same rendered prompt (no parsing at all)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, **template)
    with server.http() as http:
        response = http.post("/v1/completions", json={**GREEDY, "prompt": list(ids)})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]


def chat(server: RunningServer, **body: Any) -> httpx.Response:
    with server.http() as http:
        return http.post("/v1/chat/completions", json={**GREEDY, "messages": USER, **body})


def test_a_prompt_that_opens_the_reasoning_makes_the_reply_reasoning(
    reasoning_server: RunningServer, thinking_model: Path
) -> None:
    raw = raw_reply(reasoning_server, thinking_model, USER, add_generation_prompt=True, open_think=True)
    expected = split_reasoning(raw, opened=True)
    response = chat(reasoning_server, chat_template_kwargs={"open_think": True})
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert message["reasoning"] == message["reasoning_content"] == expected.reasoning
    assert message["content"] == (expected.answer or None)
    assert expected.reasoning  # the tiny model wrote something, and none of it leaked into the content
    usage = response.json()["usage"]  # never closed: every completion token was reasoning
    assert usage["completion_tokens_details"] == {"reasoning_tokens": usage["completion_tokens"]}


def test_thinking_off_and_no_tag_leave_the_reply_whole(
    reasoning_server: RunningServer, thinking_model: Path
) -> None:
    raw = raw_reply(reasoning_server, thinking_model, USER, add_generation_prompt=True, enable_thinking=False)
    off = chat(reasoning_server, chat_template_kwargs={"enable_thinking": False}).json()["choices"][0][
        "message"
    ]
    assert off["content"] == raw and "reasoning" not in off and "reasoning_content" not in off
    # The template variable changed the prompt (an empty think block), so it reached the template.
    plain = chat(reasoning_server).json()
    assert (
        chat(reasoning_server, chat_template_kwargs={"enable_thinking": False}).json()["usage"][
            "prompt_tokens"
        ]
        > plain["usage"]["prompt_tokens"]
    )
    assert "reasoning" not in plain["choices"][0]["message"]
    assert plain["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


def test_streamed_reasoning_equals_the_whole_reply(reasoning_server: RunningServer) -> None:
    client = reasoning_server.client()
    extra = {"chat_template_kwargs": {"open_think": True}}
    whole = client.chat.completions.create(messages=USER, extra_body=extra, **GREEDY)  # type: ignore[arg-type]
    reasoning, content = "", ""
    for chunk in client.chat.completions.create(messages=USER, extra_body=extra, stream=True, **GREEDY):  # type: ignore[arg-type]
        for choice in chunk.choices:
            fields = choice.delta.model_extra or {}
            reasoning += fields.get("reasoning") or ""
            assert fields.get("reasoning") == fields.get("reasoning_content")
            content += choice.delta.content or ""
    message = whole.choices[0].message
    assert reasoning == (message.model_extra or {})["reasoning"] and reasoning
    assert content == (message.content or "")


def test_include_reasoning_false_drops_it(reasoning_server: RunningServer) -> None:
    response = chat(reasoning_server, chat_template_kwargs={"open_think": True}, include_reasoning=False)
    message = response.json()["choices"][0]["message"]
    assert "reasoning" not in message and "reasoning_content" not in message
    assert message["content"] is None  # the whole reply was reasoning


def test_without_a_parser_the_reply_stays_whole(plain_server: RunningServer, thinking_model: Path) -> None:
    raw = raw_reply(plain_server, thinking_model, USER, add_generation_prompt=True, open_think=True)
    reply = chat(plain_server, chat_template_kwargs={"open_think": True}).json()
    message = reply["choices"][0]["message"]
    assert message["content"] == raw and "reasoning" not in message
    assert "completion_tokens_details" not in reply["usage"]


def test_continue_final_message_prefills_the_reply(
    reasoning_server: RunningServer, thinking_model: Path
) -> None:
    prefill = [*USER, {"role": "assistant", "content": "<think>\nTwo and two"}]
    raw = raw_reply(reasoning_server, thinking_model, prefill, continue_final_message=True)
    response = chat(reasoning_server, messages=prefill, continue_final_message=True)
    assert response.status_code == 200, response.text
    # The prefill left the think block open: the continuation is reasoning.
    assert (
        response.json()["choices"][0]["message"]["reasoning"] == split_reasoning(raw, opened=True).reasoning
    )


def test_earlier_reasoning_reaches_the_template(reasoning_server: RunningServer) -> None:
    turn = {"role": "assistant", "content": "4."}
    history = [*USER, turn, {"role": "user", "content": "And 3 + 3?"}]
    bare = chat(reasoning_server, messages=history).json()["usage"]["prompt_tokens"]
    for field in ("reasoning", "reasoning_content"):
        replayed = [*USER, {**turn, field: "Two plus two is four."}, history[-1]]
        assert chat(reasoning_server, messages=replayed).json()["usage"]["prompt_tokens"] > bare


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"continue_final_message": True, "add_generation_prompt": True}, "continue_final_message"),
        ({"continue_final_message": True}, "messages"),  # the final message is the user's
        ({"chat_template_kwargs": {"tokenize": False}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
    ],
)
def test_bad_template_options_are_400(
    reasoning_server: RunningServer, body: dict[str, Any], param: str
) -> None:
    response = chat(reasoning_server, **body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_parser_names_match_the_cli() -> None:
    assert CLI_PARSERS == REASONING_PARSERS


def test_responses_returns_a_reasoning_item(r1_server: RunningServer) -> None:
    client = r1_server.client()
    chat_reply = client.chat.completions.create(messages=USER, **GREEDY)  # type: ignore[arg-type]
    reasoning = (chat_reply.choices[0].message.model_extra or {})["reasoning"]
    response = client.responses.create(
        model=MODEL, input="What is 2 + 2?", max_output_tokens=12, temperature=0
    )
    item = response.output[0]
    assert item.type == "reasoning" and item.content is not None
    assert item.content[0].type == "reasoning_text" and item.content[0].text == reasoning
    # Cut by max_output_tokens while still reasoning: no answer item, the reasoning is the incomplete one.
    assert len(response.output) == 1 and response.status == "incomplete" and item.status == "incomplete"
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens == 12


def test_responses_streams_reasoning_events(r1_server: RunningServer) -> None:
    client = r1_server.client()
    whole = client.responses.create(model=MODEL, input="What is 2 + 2?", max_output_tokens=12, temperature=0)
    deltas, done, final = [], [], None
    for event in client.responses.create(
        model=MODEL, input="What is 2 + 2?", max_output_tokens=12, temperature=0, stream=True
    ):
        if event.type == "response.reasoning_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.reasoning_text.done":
            done.append(event.text)
        elif event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert final is not None
    text = whole.output[0].content[0].text  # type: ignore[union-attr]
    assert "".join(deltas) == done[0] == text
    assert final.output[0].content[0].text == text  # type: ignore[union-attr]


def test_responses_input_reasoning_items_reach_the_template(r1_server: RunningServer) -> None:
    client = r1_server.client()
    turn = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4."}]},
        {"role": "user", "content": "And 3 + 3?"},
    ]
    thought = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Two plus two."}],
    }
    bare = client.responses.create(model=MODEL, input=turn, max_output_tokens=1)  # type: ignore[arg-type]
    replayed = client.responses.create(model=MODEL, input=[turn[0], thought, *turn[1:]], max_output_tokens=1)  # type: ignore[arg-type]
    assert replayed.usage is not None and bare.usage is not None
    assert replayed.usage.input_tokens > bare.usage.input_tokens


@pytest.fixture(scope="module")
def special_tags_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """<think> and </think> as special tokens (some tokenizers mark them so), which a reply must keep."""
    from model_factory import build_hf_model
    from tokenizer_factory import build_tokenizer

    folder = tmp_path_factory.mktemp("special-think")
    build_hf_model("llama", folder, seed=4, vocab_size=336)
    tokenizer = build_tokenizer(folder, vocab_size=320)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    tokenizer.chat_template = thinking_template(open_by_default=True)
    tokenizer.save_pretrained(folder, save_jinja_files=False)
    running = start_server(folder, reasoning_parser="deepseek_r1")
    yield running
    running.stop()


def test_special_think_tags_still_split(special_tags_server: RunningServer) -> None:
    close = special_tags_server.llm_engine.tokenizer.convert_tokens_to_ids("</think>")
    response = chat(special_tags_server, max_tokens=3, logit_bias={str(close): 100})
    message = response.json()["choices"][0]["message"]
    # The first </think> ends the (empty) reasoning; the model, pushed to it, writes it twice more as answer.
    assert message["reasoning"] == "" and message["content"] == "</think></think>"
    assert response.json()["usage"]["completion_tokens_details"] == {"reasoning_tokens": 1}


SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "boolean"}},
    "required": ["a"],
    "additionalProperties": False,
}
JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


def test_a_response_format_holds_after_the_reasoning(special_tags_server: RunningServer) -> None:
    """The grammar lets the model reason first; it binds the answer after </think>."""
    close = special_tags_server.llm_engine.tokenizer.convert_tokens_to_ids("</think>")
    # Nudged to close its reasoning at once, the model then writes JSON matching the schema.
    nudged = chat(special_tags_server, max_tokens=40, logit_bias={str(close): 4}, response_format=JSON_FORMAT)
    message = nudged.json()["choices"][0]["message"]
    assert message["reasoning"] == "" and set(json.loads(message["content"])) == {"a"}
    assert nudged.json()["choices"][0]["finish_reason"] == "stop"
    # Left alone, the random model reasons the whole budget: free text, which the schema did not bind.
    free = chat(special_tags_server, max_tokens=20, response_format=JSON_FORMAT).json()["choices"][0]
    assert free["finish_reason"] == "length" and free["message"]["content"] is None
    assert free["message"]["reasoning"] and not free["message"]["reasoning"].lstrip().startswith("{")


def test_a_required_tool_call_comes_after_the_reasoning(special_tags_server: RunningServer) -> None:
    close = special_tags_server.llm_engine.tokenizer.convert_tokens_to_ids("</think>")
    tool = {
        "type": "function",
        "function": {"name": "add", "parameters": SCHEMA},
    }
    response = chat(
        special_tags_server,
        max_tokens=80,
        logit_bias={str(close): 4},
        tools=[tool],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["reasoning"] == ""
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "add" and set(json.loads(call["function"]["arguments"])) == {"a"}


def test_with_reasoning_turned_off_the_format_binds_from_the_start(reasoning_server: RunningServer) -> None:
    response = chat(
        reasoning_server,
        max_tokens=150,
        response_format=JSON_FORMAT,
        chat_template_kwargs={"enable_thinking": False},
    )
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and set(json.loads(choice["message"]["content"])) == {"a"}
    assert "reasoning" not in choice["message"]


def test_a_chat_request_is_one_text_trip_and_one_engine_call(
    reasoning_server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rendering, tokenizing and reading the prompt's end go to the text thread together; the grammar is
    compiled and the prompt truncated inside the engine's add_request, the server's only engine call."""
    engine = reasoning_server.engine
    trips: list[str] = []
    text_run, add_request = engine.text._run, engine.add_request

    async def counted_run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append("text")
        return await text_run(fn, *args, **kwargs)

    async def counted_add(*args: Any, **kwargs: Any) -> Any:
        trips.append("add")
        return await add_request(*args, **kwargs)

    monkeypatch.setattr(engine.text, "_run", counted_run)
    monkeypatch.setattr(engine, "add_request", counted_add)
    response = chat(reasoning_server, response_format=JSON_FORMAT, truncate_prompt_tokens=8)
    assert response.status_code == 200, response.text
    assert trips == ["text", "add"]
    assert response.json()["usage"]["prompt_tokens"] == 8
