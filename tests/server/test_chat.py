"""/v1/chat/completions through the official openai client against a real server on loopback."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from harness import MODEL, RunningServer, start_server

from switchyard.models.tokenizer import render_chat

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the capital of France?"},
]
GREEDY = {"temperature": 0, "max_tokens": 12, "extra_body": {"ignore_eos": True}}


def test_non_streaming_answer_and_usage(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(model=MODEL, messages=MESSAGES, **GREEDY)
    assert response.object == "chat.completion" and response.model == MODEL
    assert response.id.startswith("chatcmpl-")
    [choice] = response.choices
    assert choice.index == 0 and choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.finish_reason == "length"
    usage = response.usage
    assert usage is not None and usage.completion_tokens == 12 and usage.prompt_tokens > 10
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None


def test_stream_matches_the_non_streaming_answer(client: openai.OpenAI) -> None:
    expected = (
        client.chat.completions.create(model=MODEL, messages=MESSAGES, **GREEDY).choices[0].message.content
    )
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}, **GREEDY
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    *body, finish, usage = chunks
    assert "".join(c.choices[0].delta.content or "" for c in body) == expected
    assert finish.choices[0].finish_reason == "length" and not finish.choices[0].delta.content
    assert all(c.choices[0].finish_reason is None for c in body)
    assert usage.choices == [] and usage.usage is not None and usage.usage.completion_tokens == 12


def test_stream_without_include_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **GREEDY))
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)


def test_continuous_usage_stats_put_usage_on_every_chunk(client: openai.OpenAI) -> None:
    """vLLM's stream_options.continuous_usage_stats: each chunk carries its choice's token counts so far."""
    options: Any = {"include_usage": True, "continuous_usage_stats": True}
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options=options, **GREEDY
        )
    )
    usages = [c.usage for c in chunks]
    assert all(u is not None for u in usages)
    prompt_tokens = {u.prompt_tokens for u in usages if u is not None}
    counts = [u.completion_tokens for u in usages if u is not None]
    assert len(prompt_tokens) == 1 and counts[0] == 0 and counts == sorted(counts) and counts[-1] == 12
    assert chunks[-1].choices == [] and chunks[-2].choices[0].finish_reason == "length" and counts[-2] == 12


def test_n_samples(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        n=2,
        temperature=1.0,
        seed=3,
        max_tokens=10,
        extra_body={"ignore_eos": True},
    )
    assert [c.index for c in response.choices] == [0, 1]
    assert response.choices[0].message.content != response.choices[1].message.content
    assert response.usage is not None and response.usage.completion_tokens == 20

    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        n=2,
        temperature=1.0,
        seed=3,
        max_tokens=10,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    texts = {0: "", 1: ""}
    roles, finishes = [], []
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.delta.role:
                roles.append(choice.index)
            if choice.finish_reason:
                finishes.append(choice.index)
    assert sorted(roles) == [0, 1] and sorted(finishes) == [0, 1]
    assert [texts[0], texts[1]] == [c.message.content for c in response.choices]


def test_stop_string_ends_the_answer(client: openai.OpenAI) -> None:
    full = client.chat.completions.create(model=MODEL, messages=MESSAGES, **GREEDY).choices[0].message.content
    assert full and len(full) >= 4
    stop = full[2:4]
    cut = full[: full.index(stop)]
    response = client.chat.completions.create(model=MODEL, messages=MESSAGES, stop=[stop], **GREEDY)
    choice = response.choices[0]
    assert choice.message.content == cut and choice.finish_reason == "stop"
    assert choice.model_extra is not None and choice.model_extra["stop_reason"] == stop


def test_logprobs(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, logprobs=True, top_logprobs=3, **GREEDY
    )
    choice = response.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    entries = choice.logprobs.content
    assert len(entries) == 12
    for entry in entries:
        assert len(entry.top_logprobs) == 3
        assert entry.logprob <= 0 and math.isclose(entry.logprob, entry.top_logprobs[0].logprob, abs_tol=1e-5)
        assert entry.bytes and all(0 <= b < 256 for b in entry.bytes)
    # A token's bytes are its share of the answer's UTF-8 (tokens may split a character).
    assert bytes(b for e in entries for b in e.bytes).decode("utf-8", "replace") == choice.message.content

    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, logprobs=True, top_logprobs=3, stream=True, **GREEDY
    )
    streamed = [e for c in stream for ch in c.choices if ch.logprobs for e in ch.logprobs.content or []]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in entries])


def test_seed_makes_sampling_reproducible(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str | None:
        response = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            temperature=1.0,
            seed=seed,
            max_tokens=16,
            extra_body={"ignore_eos": True},
        )
        return response.choices[0].message.content

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)


def test_extra_fields_and_vllm_extras_are_accepted(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model=MODEL,
        messages=[
            *MESSAGES,
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And Spain?"},
        ],
        max_completion_tokens=5,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        logit_bias={"65": 5},
        user="tenant-a",
        metadata={"k": "v"},
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 5, "priority": 1},
    )
    assert response.usage is not None and response.usage.completion_tokens == 5


def test_tool_messages_render(client: openai.OpenAI) -> None:
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12 C"},
    ]
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    response = client.chat.completions.create(model=MODEL, messages=messages, tools=tools, max_tokens=3)
    assert response.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_usage_reports_cached_prompt_tokens(server: RunningServer, client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Repeat after me: " + "the quick brown fox " * 12}]

    def cached() -> int:
        usage = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2).usage
        assert usage is not None and usage.prompt_tokens_details is not None
        return usage.prompt_tokens_details.cached_tokens or 0

    cached()
    again = cached()
    if getattr(server.llm_engine.config, "enable_prefix_caching", False):
        block = server.llm_engine.config.block_size
        assert again > 0 and again % block == 0
    else:
        assert again == 0


def test_usage_counts_the_rendered_prompt(server: RunningServer, client: openai.OpenAI) -> None:
    expected = len(render_chat(server.llm_engine.tokenizer, MESSAGES))
    response = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=1)
    assert response.usage is not None and response.usage.prompt_tokens == expected


# Llama 3.1's and Qwen2.5's templates write an earlier call's arguments with `tojson`, expecting an object.
TOJSON_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    '{% for call in m.tool_calls or [] %}{"name": "{{ call.function.name }}", '
    '"parameters": {{ call.function.arguments | tojson }}}{% endfor %}<|im_end|>\n{% endfor %}'
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def tojson_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("tojson-template")
    shutil.copytree(tiny_model_dir, folder, dirs_exist_ok=True)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["chat_template"] = TOJSON_TEMPLATE
    config_file.write_text(json.dumps(config))
    running = start_server(folder)
    yield running
    running.stop()


def test_earlier_tool_call_arguments_reach_the_template_as_an_object(tojson_server: RunningServer) -> None:
    """The API carries arguments as a JSON string; templates get them parsed, as vLLM and transformers do."""

    def conversation(arguments: Any) -> list[dict[str, Any]]:
        call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": arguments}}
        return [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12 C"},
        ]

    arguments = '{"city": "Oslo", "days": [1, 2]}'
    tokenizer = tojson_server.llm_engine.tokenizer
    as_object = render_chat(tokenizer, conversation(json.loads(arguments)))
    assert len(as_object) != len(render_chat(tokenizer, conversation(arguments)))  # the test tells them apart
    response = tojson_server.client().chat.completions.create(
        model=MODEL,
        messages=conversation(arguments),  # type: ignore[arg-type]
        max_tokens=1,
    )
    assert response.usage is not None and response.usage.prompt_tokens == len(as_object)
