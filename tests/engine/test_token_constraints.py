"""vLLM's token-level request options through the offline API: allowed_token_ids, bad_words,
truncate_prompt_tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard import LLM, SamplingParams
from switchyard.errors import InvalidRequestError

PROMPT = "def main() -> None:\n    print("


@pytest.fixture(scope="module")
def llm(tiny_model_dir: Path) -> LLM:
    return LLM(str(tiny_model_dir), dtype="float32", max_model_len=256, kv_cache_memory=8 << 20)


def greedy(**kwargs: object) -> SamplingParams:
    options: dict[str, object] = {"temperature": 0, "max_tokens": 24, "ignore_eos": True, **kwargs}
    return SamplingParams(**options)  # type: ignore[arg-type]


def contains(tokens: list[int], word: tuple[int, ...]) -> bool:
    return any(tuple(tokens[i : i + len(word)]) == word for i in range(len(tokens) - len(word) + 1))


def test_allowed_token_ids_limit_every_sampled_token(llm: LLM) -> None:
    free = llm.generate([PROMPT], greedy())[0].outputs[0].token_ids
    allowed = sorted({t for t in range(40, 80)} - set(free[:1]))
    for params in (
        greedy(allowed_token_ids=allowed),
        SamplingParams(temperature=1.0, seed=3, max_tokens=24, ignore_eos=True, allowed_token_ids=allowed),
    ):
        tokens = llm.generate([PROMPT], params)[0].outputs[0].token_ids
        assert len(tokens) == 24 and set(tokens) <= set(allowed)


def test_a_bad_word_never_appears_and_changes_nothing_before_it(llm: LLM) -> None:
    tokenizer = llm.get_tokenizer()
    free = llm.generate([PROMPT], greedy())[0].outputs[0].token_ids
    # Ban a two-token stretch of the free output, written as text the tokenizer spells the same way.
    start = next(
        i
        for i in range(2, len(free) - 1)
        if tokenizer.encode(tokenizer.decode(free[i : i + 2]), add_special_tokens=False) == free[i : i + 2]
    )
    word = tokenizer.decode(free[start : start + 2])
    banned = llm.generate([PROMPT], greedy(bad_words=[word]))[0]
    tokens = banned.outputs[0].token_ids
    assert not contains(tokens, tuple(free[start : start + 2]))
    assert tokens[: start + 1] == free[: start + 1], (
        "the ban binds only where the word's last token would come"
    )
    assert tokens != free


def test_bad_words_hold_under_speculative_decoding(tiny_model_dir: Path, llm: LLM) -> None:
    (am,) = llm.get_tokenizer().encode("am", add_special_tokens=False)
    prompt = [182, am] * 8  # a loop this model continues, so n-gram drafts carry the banned token
    free = llm.generate([prompt], greedy(max_tokens=30))[0].outputs[0].token_ids
    assert am in free, "the free output should hold the word, or the ban below tests nothing"
    plain = llm.generate([prompt], greedy(max_tokens=30, bad_words=["am"]))[0].outputs[0].token_ids
    assert am not in plain
    spec = LLM(
        str(tiny_model_dir),
        dtype="float32",
        max_model_len=256,
        kv_cache_memory=8 << 20,
        speculative_method="ngram",
    )
    speculated = spec.generate([prompt], greedy(max_tokens=30, bad_words=["am"]))[0].outputs[0].token_ids
    assert spec.engine.spec_decoder.stats.proposed > 0
    assert speculated == plain


def test_truncate_prompt_tokens_keeps_the_prompts_end(llm: LLM) -> None:
    prompt = list(range(10, 60))
    truncated = llm.generate([prompt], greedy(truncate_prompt_tokens=20))[0]
    assert truncated.prompt_token_ids == prompt[-20:]
    assert truncated.outputs[0].token_ids == llm.generate([prompt[-20:]], greedy())[0].outputs[0].token_ids
    # -1: as much of the prompt as fits beside max_tokens in the 256-token context.
    fitted = llm.generate([list(range(10, 310))], greedy(truncate_prompt_tokens=-1))[0]
    assert len(fitted.prompt_token_ids) == 256 - 24
    assert fitted.prompt_token_ids[-1] == 309


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"allowed_token_ids": [1, 999]}, "allowed_token_ids"),
        ({"allowed_token_ids": ["3"]}, "allowed_token_ids"),
        ({"bad_words": [""]}, "bad_words"),
        ({"bad_words": [3]}, "bad_words"),
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
        ({"truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    ],
)
def test_bad_values_name_their_field(llm: LLM, kwargs: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        llm.generate([PROMPT], greedy(**kwargs))
    assert info.value.param == param
    assert not llm.engine.has_unfinished_requests()


def test_allowed_ids_that_min_tokens_would_forbid_are_refused(llm: LLM) -> None:
    eos = llm.engine.eos_token_ids[0]
    with pytest.raises(InvalidRequestError) as info:
        llm.generate([PROMPT], SamplingParams(max_tokens=8, min_tokens=2, allowed_token_ids=[eos]))
    assert info.value.param == "allowed_token_ids"
