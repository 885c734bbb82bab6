"""vLLM's token-level request extras over HTTP: allowed_token_ids, bad_words, truncate_prompt_tokens,
prompt_logprobs and return_tokens_as_token_ids, on chat and completions, with the official client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from harness import MODEL, RunningServer, start_server

GREEDY = {"temperature": 0, "max_tokens": 12}
MESSAGES = [{"role": "user", "content": "Tell me about trains."}]


def test_allowed_token_ids_on_completions_and_chat(server: RunningServer, client: openai.OpenAI) -> None:
    allowed = list(range(60, 90))
    completion = client.completions.create(
        model=MODEL,
        prompt="Hello",
        logprobs=0,
        **GREEDY,
        extra_body={"ignore_eos": True, "allowed_token_ids": allowed, "return_tokens_as_token_ids": True},
    )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens is not None
    ids = [int(token.removeprefix("token_id:")) for token in logprobs.tokens]
    assert len(ids) == 12 and set(ids) <= set(allowed)
    chat = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        logprobs=True,
        **GREEDY,
        extra_body={"ignore_eos": True, "allowed_token_ids": allowed, "return_tokens_as_token_ids": True},
    )
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and all(int(e.token.removeprefix("token_id:")) in allowed for e in content)


def test_bad_words_are_never_generated(server: RunningServer, client: openai.OpenAI) -> None:
    tokenizer = server.llm_engine.tokenizer
    free = client.completions.create(
        model=MODEL, prompt="Hello", logprobs=0, **GREEDY, extra_body={"return_tokens_as_token_ids": True}
    )
    free_ids = [int(t.removeprefix("token_id:")) for t in free.choices[0].logprobs.tokens]  # type: ignore[union-attr]
    word_id = next(
        t for t in free_ids if tokenizer.encode(tokenizer.decode([t]), add_special_tokens=False) == [t]
    )
    banned = client.completions.create(
        model=MODEL,
        prompt="Hello",
        logprobs=0,
        **GREEDY,
        extra_body={"bad_words": [tokenizer.decode([word_id])], "return_tokens_as_token_ids": True},
    )
    banned_ids = [int(t.removeprefix("token_id:")) for t in banned.choices[0].logprobs.tokens]  # type: ignore[union-attr]
    assert word_id not in banned_ids and banned_ids != free_ids


def test_truncate_prompt_tokens_counts_the_kept_prompt(client: openai.OpenAI) -> None:
    long_prompt = list(range(10, 200))
    response = client.completions.create(
        model=MODEL, prompt=long_prompt, **GREEDY, extra_body={"truncate_prompt_tokens": 32}
    )
    assert response.usage is not None and response.usage.prompt_tokens == 32
    expected = client.completions.create(model=MODEL, prompt=long_prompt[-32:], **GREEDY).choices[0].text
    assert response.choices[0].text == expected
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            **GREEDY,
            extra_body={
                "truncate_prompt_tokens": 5,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        )
    )
    usages = [c.usage.prompt_tokens for c in chunks if c.usage is not None]
    assert usages and set(usages) == {5}


def test_echo_shows_the_truncated_prompt(server: RunningServer, client: openai.OpenAI) -> None:
    prompt = "The quick brown fox jumps over the lazy dog"
    ids = server.llm_engine.tokenizer.encode(prompt)
    response = client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=0,
        echo=True,
        logprobs=0,
        extra_body={"truncate_prompt_tokens": 4},
    )
    choice = response.choices[0]
    assert choice.text == server.llm_engine.tokenizer.decode(ids[-4:])
    assert (
        choice.logprobs is not None
        and choice.logprobs.tokens is not None
        and len(choice.logprobs.tokens) == 4
    )
    assert "".join(choice.logprobs.tokens) == choice.text


def test_logprob_tokens_are_text_unless_asked(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        logprobs=True,
        top_logprobs=2,
        **GREEDY,
        extra_body={"return_tokens_as_token_ids": True},
    )
    content = response.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None
    for entry in content:
        assert entry.token.startswith("token_id:") and entry.bytes is not None
        assert all(top.token.startswith("token_id:") for top in entry.top_logprobs)
    plain = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        logprobs=True,
        **GREEDY,
    )
    assert not any(e.token.startswith("token_id:") for e in plain.choices[0].logprobs.content)  # type: ignore[union-attr]


def test_prompt_logprobs_on_completions_agree_with_echo(client: openai.OpenAI) -> None:
    prompt = [5, 17, 99, 4, 250, 31, 8]
    response = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=1, temperature=0, extra_body={"prompt_logprobs": 2}
    )
    rows = response.choices[0].model_extra["prompt_logprobs"]  # type: ignore[index]
    assert len(rows) == len(prompt) and rows[0] is None
    echo = client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True, logprobs=2)
    echoed = echo.choices[0].logprobs.token_logprobs  # type: ignore[union-attr]
    for position, row in enumerate(rows[1:], start=1):
        own = row[str(prompt[position])]
        assert own["logprob"] == pytest.approx(echoed[position], abs=1e-5)  # type: ignore[index]
        by_rank = sorted(row.values(), key=lambda e: e["rank"])
        assert [e["logprob"] for e in by_rank] == sorted((e["logprob"] for e in by_rank), reverse=True)
        if len(row) == 2:  # the prompt's token is one of the top two
            assert [e["rank"] for e in by_rank] == [1, 2]
        else:
            assert len(row) == 3 and [e["rank"] for e in by_rank[:2]] == [1, 2] and own["rank"] >= 3
        assert all(isinstance(e["decoded_token"], str) for e in row.values())
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1)
    assert "prompt_logprobs" not in (plain.choices[0].model_extra or {})


def test_prompt_logprobs_on_chat_cover_the_rendered_prompt(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        **GREEDY,
        extra_body={"prompt_logprobs": 0},
    )
    rows = response.model_extra["prompt_logprobs"]  # type: ignore[index]
    assert response.usage is not None and len(rows) == response.usage.prompt_tokens
    assert rows[0] is None and all(len(row) == 1 for row in rows[1:])
    plain = client.chat.completions.create(model=MODEL, messages=MESSAGES, **GREEDY)  # type: ignore[arg-type]
    assert "prompt_logprobs" not in (plain.model_extra or {})
    assert all(next(iter(row.values()))["rank"] >= 1 for row in rows[1:])
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            **GREEDY,
            extra_body={"prompt_logprobs": 1},
        )
    assert info.value.body["param"] == "prompt_logprobs"  # type: ignore[index]


@pytest.fixture(scope="module")
def ids_server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir, return_tokens_as_token_ids=True)
    yield running
    running.stop()


def test_the_server_flag_sets_the_default_and_a_request_overrides_it(ids_server: RunningServer) -> None:
    client = ids_server.client()
    by_default = client.completions.create(model=MODEL, prompt="Hi", logprobs=1, **GREEDY)
    tokens = by_default.choices[0].logprobs.tokens  # type: ignore[union-attr]
    assert tokens and all(t.startswith("token_id:") for t in tokens)
    overridden = client.completions.create(
        model=MODEL, prompt="Hi", logprobs=1, **GREEDY, extra_body={"return_tokens_as_token_ids": False}
    )
    text = "".join(overridden.choices[0].logprobs.tokens)  # type: ignore[union-attr,arg-type]
    assert text == overridden.choices[0].text


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"allowed_token_ids": [5, 100000]}, "allowed_token_ids"),
        ({"bad_words": [""]}, "bad_words"),
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
        ({"allowed_token_ids": [5, 6], "response_format": {"type": "json_object"}}, "allowed_token_ids"),
    ],
)
def test_bad_values_are_400s_naming_the_field(
    client: openai.OpenAI, extra: dict[str, object], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,  # type: ignore[arg-type]
            **GREEDY,
            extra_body=extra,
        )
    assert info.value.body["param"] == param  # type: ignore[index]
