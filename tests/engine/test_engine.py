"""Engine behaviour through the offline API: batching, preemption, chunked prefill, sampling options."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from switchyard import LLM, SamplingParams
from switchyard.errors import InvalidRequestError


def random_prompts(count: int, seed: int, low: int = 3, high: int = 90) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 320) for _ in range(rng.randint(low, high))] for _ in range(count)]


GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tiny_model_dir: Path) -> LLM:
    return LLM(str(tiny_model_dir), dtype="float32", max_model_len=256, kv_cache_memory=8 << 20)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return random_prompts(64, seed=0)


@pytest.fixture(scope="module")
def alone(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    """Greedy outputs of each prompt run on its own."""
    return [llm.generate([p], GREEDY)[0].outputs[0].token_ids for p in prompts]


def test_batch_of_64_equals_each_alone(llm: LLM, prompts: list[list[int]], alone: list[list[int]]) -> None:
    together = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
    assert together == alone


def test_batch_invariance_under_preemption_and_chunked_prefill(
    llm: LLM, tiny_model_dir: Path, prompts: list[list[int]], alone: list[list[int]]
) -> None:
    # 20 blocks of 16 tokens hold only a few sequences of up to 130 tokens, so 64 requests force repeated
    # preemption; a token budget of 32 splits most prompts over several steps.
    long = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    kv_bytes_per_block = 16 * 2 * 2 * 2 * 16 * 4  # tokens x K/V x layers x kv_heads x head_dim x fp32
    small = LLM(
        str(tiny_model_dir),
        dtype="float32",
        max_model_len=256,
        kv_cache_memory=20 * kv_bytes_per_block,
        max_num_batched_tokens=32,
        max_num_seqs=16,
    )
    assert small.engine.block_manager.num_blocks == 20
    constrained = [o.outputs[0].token_ids for o in small.generate(prompts, long)]
    assert small.engine.scheduler.num_preemptions > 0
    assert small.engine.block_manager.num_free_blocks == 20
    roomy = [o.outputs[0].token_ids for o in llm.generate(prompts, long)]
    assert constrained == roomy
    assert [c[:12] for c in constrained] == alone


def test_seeded_sampling_is_reproducible_whatever_the_batch(llm: LLM, prompts: list[list[int]]) -> None:
    seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=1234, max_tokens=10, ignore_eos=True)
    alone = llm.generate([prompts[0]], seeded)[0].outputs[0].token_ids
    others = SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True)
    mixed = llm.generate([prompts[5], prompts[0], prompts[9]], [others, seeded, others])
    assert mixed[1].outputs[0].token_ids == alone
    unseeded = [llm.generate([prompts[0]], others)[0].outputs[0].token_ids for _ in range(3)]
    assert len({tuple(u) for u in unseeded}) > 1, "unseeded sampling should vary"


def test_n_samples_share_prompt_blocks(llm: LLM) -> None:
    engine = llm.engine
    prompt = random_prompts(1, seed=3, low=40, high=40)[0]  # 40 tokens: 2 full blocks + 1 partial
    params = SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=5, ignore_eos=True)
    free_before = engine.block_manager.num_free_blocks
    engine.add_request("shared", prompt, params)
    outputs = engine.step()  # prefill, then fork into 4 samples with the first token each
    assert outputs and len(outputs[0].outputs) == 4
    # All four share the prompt's 3 blocks until they write: 3 blocks in use, not 12.
    assert free_before - engine.block_manager.num_free_blocks == 3
    engine.step()  # each sample writes into the shared partial block: copy-on-write for 3 of them
    assert free_before - engine.block_manager.num_free_blocks == 3 + 3
    while engine.has_unfinished_requests():
        final = engine.step()
    assert final[0].finished and len({tuple(c.token_ids) for c in final[0].outputs}) > 1
    assert engine.block_manager.num_free_blocks == free_before


def test_max_min_tokens_and_ignore_eos(llm: LLM, tiny_model_dir: Path) -> None:
    prompts = random_prompts(8, seed=4)
    eos = llm.engine.eos_token_ids[0]
    # Bias towards EOS so that it would end every sequence at once without min_tokens.
    biased = SamplingParams(temperature=0, max_tokens=20, min_tokens=6, logit_bias={eos: 100})
    for output in llm.generate(prompts, biased):
        completion = output.outputs[0]
        assert len(completion.token_ids) == 7 and completion.token_ids[-1] == eos
        assert completion.finish_reason == "stop"
    ignoring = SamplingParams(temperature=0, max_tokens=9, logit_bias={eos: 100}, ignore_eos=True)
    for output in llm.generate(prompts, ignoring):
        assert len(output.outputs[0].token_ids) == 9 and output.outputs[0].finish_reason == "length"


def test_stop_strings_and_stop_token_ids(llm: LLM) -> None:
    prompt = random_prompts(1, seed=5)[0]
    free = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))[0].outputs[0]
    text = free.text
    assert len(text) > 8
    stop = text[4:7]
    first = text.find(stop)
    stopped = llm.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=30, stop=[stop], ignore_eos=True)
    )
    completion = stopped[0].outputs[0]
    assert completion.text == text[:first]
    assert completion.finish_reason == "stop" and completion.stop_reason == stop
    token = free.token_ids[3]
    by_id = llm.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[token], ignore_eos=True)
    )
    completion = by_id[0].outputs[0]
    assert completion.token_ids == free.token_ids[: free.token_ids.index(token) + 1]
    assert completion.stop_reason == token


def test_logprobs_match_reference_log_softmax(llm: LLM) -> None:
    prompt = random_prompts(1, seed=6, low=10, high=10)[0]
    params = SamplingParams(
        temperature=0.8, seed=3, max_tokens=4, logprobs=3, prompt_logprobs=2, ignore_eos=True
    )
    output = llm.generate([prompt], params)[0]
    completion = output.outputs[0]
    tokens = prompt + completion.token_ids
    # Reference: a full forward of the whole sequence through transformers.
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(llm.engine.model_path, dtype=torch.float32)
    with torch.no_grad():
        reference = torch.log_softmax(hf(torch.tensor([tokens])).logits[0].float(), dim=-1)
    for i, entry in enumerate(completion.logprobs or []):
        position = len(prompt) - 1 + i
        assert entry.logprob <= 0
        assert math.isclose(entry.logprob, reference[position, entry.token_id].item(), abs_tol=1e-4)
        top_ids = reference[position].topk(3).indices.tolist()
        assert [t for t, _ in entry.top] == top_ids
    assert output.prompt_logprobs is not None and output.prompt_logprobs[0] is None
    for position in range(1, len(prompt)):
        entry = output.prompt_logprobs[position]
        assert entry is not None and entry.token_id == prompt[position]
        assert math.isclose(entry.logprob, reference[position - 1, prompt[position]].item(), abs_tol=1e-4)
        assert len(entry.top) == 2
        more_likely = reference[position - 1] > reference[position - 1, prompt[position]] + 1e-4
        assert entry.rank is not None and abs(entry.rank - (1 + int(more_likely.sum()))) <= 1


@pytest.mark.parametrize(
    ("prompt", "params", "param"),
    [
        ([], SamplingParams(), "prompt"),
        ([5] * 300, SamplingParams(), "prompt"),
        ([5] * 10, SamplingParams(max_tokens=250), "max_tokens"),
        ([5, 999], SamplingParams(), "prompt"),
    ],
)
def test_bad_requests_raise_and_leave_engine_working(
    llm: LLM, prompt: list[int], params: SamplingParams, param: str
) -> None:
    with pytest.raises(InvalidRequestError) as info:
        llm.generate([prompt], params)
    assert info.value.param == param
    assert not llm.engine.has_unfinished_requests()
    assert llm.generate([[5, 6, 7]], GREEDY)[0].finished


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"n": 0}, "n"),
        ({"n": 1.5}, "n"),
        ({"temperature": "0.5"}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": True}, "top_k"),
        ({"stop": 5}, "stop"),
        ({"stop": ["ok", 3]}, "stop"),
        ({"stop_token_ids": ["7"]}, "stop_token_ids"),
        ({"logit_bias": {"7": 1.0}}, "logit_bias"),
        ({"seed": "1"}, "seed"),
        ({"max_tokens": 2.0}, "max_tokens"),
    ],
)
def test_bad_sampling_params_are_value_errors(kwargs: dict[str, float], param: str) -> None:
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, InvalidRequestError) and info.value.param == param


def test_prompt_dicts_like_vllm(llm: LLM) -> None:
    by_ids = llm.generate({"prompt_token_ids": [5, 6, 7]}, GREEDY)[0]
    assert by_ids.prompt_token_ids == [5, 6, 7] and by_ids.prompt is None
    text = "Hello there"
    mixed = llm.generate([{"prompt": text}, text, {"prompt_token_ids": by_ids.prompt_token_ids}], GREEDY)
    assert mixed[0].prompt == text and mixed[0].outputs[0].token_ids == mixed[1].outputs[0].token_ids
    assert mixed[2].outputs[0].token_ids == by_ids.outputs[0].token_ids
    assert llm.get_tokenizer() is llm.tokenizer


@pytest.mark.parametrize(
    "prompts",
    [
        {"prompt_token_ids": [5], "prompt": "both"},
        {"text": "neither"},
        [{"prompt_token_ids": ["5"]}],
        [3.5],
        42,
    ],
)
def test_malformed_prompts_are_refused_before_any_work(llm: LLM, prompts: object) -> None:
    with pytest.raises(InvalidRequestError) as info:
        llm.generate(prompts, GREEDY)  # type: ignore[arg-type]
    assert info.value.param == "prompts"
    assert not llm.engine.has_unfinished_requests()


def test_chat_applies_template(llm: LLM) -> None:
    output = llm.chat(
        [{"role": "user", "content": "Hello there"}], SamplingParams(max_tokens=5, temperature=0)
    )[0]
    rendered = llm.tokenizer.decode(output.prompt_token_ids)
    assert "<|im_start|>user\nHello there<|im_end|>" in rendered and rendered.endswith("assistant\n")


def test_chat_continues_a_final_message_and_passes_template_variables(llm: LLM) -> None:
    prefill = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am"}]
    output = llm.chat(prefill, SamplingParams(max_tokens=2, temperature=0), continue_final_message=True)[0]
    rendered = llm.tokenizer.decode(output.prompt_token_ids)
    assert rendered.endswith("<|im_start|>assistant\nHello, I am")  # left open, no new turn after it
    with pytest.raises(InvalidRequestError) as info:
        llm.chat(prefill, SamplingParams(max_tokens=2), chat_template_kwargs={"tools": []})
    assert info.value.param == "chat_template_kwargs"


def test_unset_max_tokens_fits_a_kv_cache_smaller_than_the_context(tiny_model_dir: Path) -> None:
    # 8 blocks of 16 = 128 tokens of KV, context 256: without max_tokens a request runs until the cache's end.
    small = LLM(
        str(tiny_model_dir), dtype="float32", max_model_len=256, kv_cache_memory=8 * 16 * 2 * 2 * 2 * 16 * 4
    )
    output = small.generate([[5, 6, 7, 8]], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))[
        0
    ]
    assert len(output.outputs[0].token_ids) == 128 - 4
    assert output.outputs[0].finish_reason == "length"
