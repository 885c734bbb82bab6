"""The input processor on its own: validation, truncation and max_tokens resolved once per request."""

from __future__ import annotations

import pytest
import torch

from switchyard.engine.input_processor import InputLimits, InputProcessor
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import SequenceStatus
from switchyard.engine.structured.admission import GrammarAdmission
from switchyard.errors import InvalidRequestError

EOS = (2,)
LIMITS = InputLimits(vocab_size=100, max_model_len=64, kv_cache_tokens=48, max_num_seqs=4)


def processor(limits: InputLimits = LIMITS) -> InputProcessor:
    """Without a tokenizer: prompts are token ids, and no grammar or bad word can be asked for."""
    grammars = GrammarAdmission("xgrammar", None, limits.vocab_size, EOS)
    return InputProcessor(None, EOS, limits, torch.device("cpu"), grammars)


def test_a_request_comes_with_its_first_waiting_sequence() -> None:
    request = processor().process(
        "r", [5, 6, 7], SamplingParams(max_tokens=4, seed=1), priority=2, tenant="t"
    )
    assert request.prompt_token_ids == [5, 6, 7] and request.max_tokens == 4
    assert (request.priority, request.tenant, request.eos_token_ids) == (2, "t", EOS)
    [seq] = request.sequences
    assert seq.token_ids == [5, 6, 7] and seq.token_ids is not request.prompt_token_ids
    assert seq.status is SequenceStatus.WAITING and seq.grammar is None and seq.generator is not None


def test_unset_max_tokens_is_what_the_context_and_the_kv_cache_leave() -> None:
    request = processor().process("r", [1] * 10, SamplingParams(max_tokens=None))
    assert request.max_tokens == 48 - 10  # the KV cache (48 tokens) is smaller than the context (64)


def test_truncation_and_max_tokens_happen_once_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = processor()
    calls = {"truncate": 0, "resolve_max_tokens": 0}
    for name in calls:
        original = getattr(inputs, name)

        def counted(*args: object, _name: str = name, _original: object = original) -> object:
            calls[_name] += 1
            return _original(*args)  # type: ignore[operator]

        monkeypatch.setattr(inputs, name, counted)
    params = SamplingParams(max_tokens=None, truncate_prompt_tokens=-1)
    request = inputs.process("r", list(range(1, 41)), params)
    assert calls == {"truncate": 1, "resolve_max_tokens": 1}
    # -1 keeps what fits beside the default of one generated token; max_tokens then fills the KV cache.
    assert request.prompt_token_ids == list(range(1, 41)) and request.max_tokens == 8


def test_truncation_keeps_the_prompts_end() -> None:
    inputs = processor()
    assert inputs.truncate([1, 2, 3, 4], SamplingParams(truncate_prompt_tokens=2)) == [3, 4]
    assert inputs.truncate([1] * 70, SamplingParams(truncate_prompt_tokens=-1, max_tokens=10)) == [1] * 54
    assert inputs.process("r", [1, 2, 3, 4], SamplingParams(truncate_prompt_tokens=2)).prompt_token_ids == [
        3,
        4,
    ]


@pytest.mark.parametrize(
    ("prompt", "params", "param"),
    [
        ([], SamplingParams(), "prompt"),
        ([100], SamplingParams(), "prompt"),
        ([1] * 64, SamplingParams(), "prompt"),
        ([1] * 40, SamplingParams(max_tokens=30), "max_tokens"),  # past the context
        ([1] * 40, SamplingParams(max_tokens=10), "max_tokens"),  # past the whole KV cache
        ([1], SamplingParams(n=5), "n"),
        ([1], SamplingParams(stop_token_ids=[100]), "stop_token_ids"),
        ([1], SamplingParams(bad_words=["no"]), "bad_words"),
        ([1], SamplingParams(allowed_token_ids=[2], min_tokens=1), "allowed_token_ids"),
    ],
)
def test_unservable_requests_are_refused(prompt: list[int], params: SamplingParams, param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        processor().process("r", prompt, params)
    assert info.value.param == param


def test_text_needs_a_tokenizer() -> None:
    with pytest.raises(InvalidRequestError, match="no tokenizer"):
        processor().process("r", "hello", SamplingParams())


def test_forking_adds_the_other_samples_once() -> None:
    inputs = processor()
    request = inputs.process("r", [5, 6, 7], SamplingParams(n=3, seed=4))
    parent = request.sequences[0]
    parent.num_computed_tokens = 3
    children = inputs.fork(parent)
    assert [c.sample_index for c in children] == [1, 2]
    assert all(c.token_ids == parent.token_ids and c.num_computed_tokens == 3 for c in children)
    assert request.sequences == [parent, *children] and request.forked
    assert inputs.fork(parent) == [] and inputs.fork(children[0]) == []
