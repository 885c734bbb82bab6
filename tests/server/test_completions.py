"""/v1/completions: every prompt shape, n, logprobs, streaming with several prompts."""

from __future__ import annotations

from typing import Any

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


def test_continuous_usage_stats(client: openai.OpenAI) -> None:
    options: Any = {"include_usage": True, "continuous_usage_stats": True}
    chunks = list(
        client.completions.create(model=MODEL, prompt="Hello", stream=True, stream_options=options, **GREEDY)
    )
    counts = [c.usage.completion_tokens for c in chunks if c.usage is not None]
    assert len(counts) == len(chunks) and counts == sorted(counts) and counts[0] >= 1 and counts[-1] == 8


def test_unsupported_options_are_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="Hello", suffix="world")
    assert info.value.body["param"] == "suffix"  # type: ignore[index]


@pytest.mark.parametrize("logprobs", [0, 2])
def test_top_logprobs_always_hold_the_sampled_token(client: openai.OpenAI, logprobs: int) -> None:
    """OpenAI returns up to logprobs + 1 alternatives: the sampled token is always among them."""
    response = client.completions.create(
        model=MODEL, prompt="Hello", logprobs=logprobs, temperature=1.0, seed=5, max_tokens=8
    )
    result = response.choices[0].logprobs
    assert result is not None and result.tokens and result.token_logprobs and result.top_logprobs
    for token, logprob, top in zip(result.tokens, result.token_logprobs, result.top_logprobs, strict=True):
        # Tokens can share a text ("\ufffd" for partial characters): the entry is then the best of them.
        assert top is not None and top[token] >= logprob - 1e-5
        assert len(top) <= logprobs + 1


@pytest.mark.parametrize("as_ids", [False, True], ids=["strings", "token-lists"])
def test_echo_puts_the_prompt_before_each_choice(
    server: RunningServer, client: openai.OpenAI, as_ids: bool
) -> None:
    tokenizer = server.llm_engine.tokenizer
    texts = ["Hello world", "Echo me"]
    prompts = [tokenizer.encode(t) for t in texts] if as_ids else texts
    heads = [tokenizer.decode(p) for p in prompts] if as_ids else texts
    plain = client.completions.create(model=MODEL, prompt=prompts, n=2, **GREEDY)
    echoed = client.completions.create(model=MODEL, prompt=prompts, n=2, echo=True, **GREEDY)
    expected = [heads[c.index // 2] + c.text for c in plain.choices]
    assert [c.text for c in echoed.choices] == expected
    assert echoed.usage == plain.usage

    streamed = {i: "" for i in range(4)}
    for chunk in client.completions.create(
        model=MODEL, prompt=prompts, n=2, echo=True, stream=True, **GREEDY
    ):
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
    assert list(streamed.values()) == expected


def test_echo_with_logprobs_scores_the_prompt(server: RunningServer, client: openai.OpenAI) -> None:
    """The scoring call of evaluation harnesses: the prompt's logprobs, the first null, as the model gives them.

    After the prefix, the best alternative must be the token greedy decoding picks there, at the same logprob."""
    prefix = [11, 12, 13, 14, 15, 16, 17]  # shorter than a KV block: no prefix-cache hit, see below
    greedy = client.completions.create(model=MODEL, prompt=prefix, logprobs=1, temperature=0, max_tokens=1)
    picked = greedy.choices[0].logprobs
    assert picked is not None and picked.tokens and picked.token_logprobs
    prompt = [*prefix, 200]
    texts = [server.llm_engine.tokenizer.decode([t]) for t in prompt]
    kwargs: dict = {"model": MODEL, "prompt": prompt, "logprobs": 1, "echo": True, "max_tokens": 0}
    response = client.completions.create(**kwargs)
    streamed = [c for chunk in client.completions.create(stream=True, **kwargs) for c in chunk.choices]
    assert response.usage is not None and response.usage.completion_tokens == 0
    assert response.usage.prompt_tokens == len(prompt)
    for choice in (response.choices[0], *streamed):
        result = choice.logprobs
        assert choice.text == "".join(texts) and choice.finish_reason == "length"
        assert result is not None and result.tokens == texts
        assert result.token_logprobs is not None and result.token_logprobs[0] is None
        assert result.top_logprobs is not None and result.top_logprobs[0] is None
        assert all(lp is not None and lp <= 0 for lp in result.token_logprobs[1:])
        assert result.text_offset == [sum(map(len, texts[:i])) for i in range(len(texts))]
        best = result.top_logprobs[-1]
        assert best is not None and max(best, key=best.__getitem__) == picked.tokens[0]
        assert max(best.values()) == pytest.approx(picked.token_logprobs[0], abs=1e-4)


def test_echo_with_logprobs_of_a_cached_prompt(client: openai.OpenAI) -> None:
    prompt = list(range(30, 70))  # longer than a KV block, so the second request hits the prefix cache
    first, second = (
        client.completions.create(model=MODEL, prompt=prompt, logprobs=1, echo=True, max_tokens=0).choices[0]
        for _ in range(2)
    )
    assert first.logprobs is not None and second.logprobs is not None
    assert second.logprobs.token_logprobs == pytest.approx(first.logprobs.token_logprobs, abs=1e-4)
