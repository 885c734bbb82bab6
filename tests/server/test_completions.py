"""/v1/completions: every prompt shape, n, logprobs, streaming with several prompts."""

from __future__ import annotations

import openai
import pytest
from harness import MODEL, RunningServer

GREEDY = {"temperature": 0, "max_tokens": 8, "extra_body": {"ignore_eos": True}}


def alone(client: openai.OpenAI, prompt: str | list[int]) -> str:
    return client.completions.create(model=MODEL, prompt=prompt, **GREEDY).choices[0].text


def test_string_prompt(client: openai.OpenAI) -> None:
    response = client.completions.create(model=MODEL, prompt="The quick brown fox", **GREEDY)
    assert response.object == "text_completion" and response.id.startswith("cmpl-")
    [choice] = response.choices
    assert choice.index == 0 and choice.finish_reason == "length" and isinstance(choice.text, str)
    assert response.usage is not None and response.usage.completion_tokens == 8


def test_default_max_tokens_is_16(client: openai.OpenAI) -> None:
    response = client.completions.create(model=MODEL, prompt="Hello", extra_body={"ignore_eos": True})
    assert response.usage is not None and response.usage.completion_tokens == 16


@pytest.mark.parametrize(
    "prompts",
    [["Hello world", "Café crème"], [[5, 6, 7, 8], [40, 41, 42]]],
    ids=["strings", "token-lists"],
)
def test_several_prompts_give_choices_in_prompt_order(client: openai.OpenAI, prompts: list) -> None:
    response = client.completions.create(model=MODEL, prompt=prompts, n=2, **GREEDY)
    assert [c.index for c in response.choices] == [0, 1, 2, 3]
    texts = [c.text for c in response.choices]
    assert texts == [alone(client, prompts[0])] * 2 + [alone(client, prompts[1])] * 2
    assert response.usage is not None and response.usage.completion_tokens == 32


def test_token_prompt(server: RunningServer, client: openai.OpenAI) -> None:
    text = "Switchyard serves language models"
    ids = server.llm_engine.tokenizer.encode(text)
    response = client.completions.create(model=MODEL, prompt=ids, **GREEDY)
    assert response.choices[0].text == alone(client, text)
    assert response.usage is not None and response.usage.prompt_tokens == len(ids)


def test_logprobs(client: openai.OpenAI) -> None:
    response = client.completions.create(model=MODEL, prompt="Hello", logprobs=2, **GREEDY)
    logprobs = response.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.tokens is not None and len(logprobs.tokens) == 8
    assert logprobs.token_logprobs is not None and all(lp <= 0 for lp in logprobs.token_logprobs)
    assert logprobs.top_logprobs is not None and all(1 <= len(t) <= 2 for t in logprobs.top_logprobs)
    assert logprobs.text_offset is not None and logprobs.text_offset[0] == 0
    assert logprobs.text_offset == sorted(logprobs.text_offset)


def test_streaming_several_prompts(client: openai.OpenAI) -> None:
    prompts = ["Hello world", "日本語のテキスト"]
    expected = client.completions.create(model=MODEL, prompt=prompts, **GREEDY)
    texts = {0: "", 1: ""}
    finishes: list[int] = []
    usage = None
    for chunk in client.completions.create(
        model=MODEL, prompt=prompts, stream=True, stream_options={"include_usage": True}, **GREEDY
    ):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason:
                finishes.append(choice.index)
    assert [texts[0], texts[1]] == [c.text for c in expected.choices]
    assert sorted(finishes) == [0, 1]
    assert usage is not None and usage.completion_tokens == 16


def test_unsupported_options_are_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="Hello", echo=True)
    assert info.value.body["param"] == "echo"  # type: ignore[index]


def test_one_bad_prompt_fails_the_request_and_leaves_nothing_running(
    server: RunningServer, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt=[[5, 6, 7], [5, 99999]], max_tokens=100)
    assert info.value.body["param"] == "prompt"  # type: ignore[index]
    assert server.wait_for_free_blocks() == 0
