"""KV cache entries stored narrower than the model computes: budget, write/read paths, accuracy, bad names."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine_args import KV_CACHE_DTYPE_NAMES
from switchyard.models.attention import write_kv
from switchyard.models.kv_cache_dtype import KV_CACHE_DTYPES, narrow, resolve_kv_cache_dtype

KV_MEMORY = 4 << 20


def test_names_resolve_and_unknown_ones_are_refused() -> None:
    assert tuple(KV_CACHE_DTYPES) == KV_CACHE_DTYPE_NAMES
    assert resolve_kv_cache_dtype("auto", torch.bfloat16) == torch.bfloat16
    assert resolve_kv_cache_dtype("bfloat16", torch.float32) == torch.bfloat16
    assert resolve_kv_cache_dtype("fp8", torch.float32) == torch.float8_e4m3fn
    assert resolve_kv_cache_dtype("fp8_e5m2", torch.float32) == torch.float8_e5m2
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        resolve_kv_cache_dtype("int4", torch.float32)
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        EngineConfig(model="x", kv_cache_dtype="fp4")


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_clamps_instead_of_making_nan(dtype: torch.dtype) -> None:
    x = torch.tensor([1e6, -1e6, 1.0, 0.0])
    stored = narrow(x, dtype).float()
    limit = torch.finfo(dtype).max
    assert torch.equal(stored, torch.tensor([limit, -limit, 1.0, 0.0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_write_kv_stores_narrowed_entries_in_their_slots(dtype: torch.dtype) -> None:
    blocks, block_size, heads, head_dim = 4, 8, 2, 16
    k_cache = torch.zeros(blocks, block_size, heads, head_dim, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    key, value = torch.randn(3, heads, head_dim), torch.randn(3, heads, head_dim)
    slots = torch.tensor([0, 9, 31])
    write_kv(key, value, k_cache, v_cache, slots)
    flat_k, flat_v = k_cache.view(-1, heads, head_dim), v_cache.view(-1, heads, head_dim)
    assert torch.equal(flat_k[slots].float(), narrow(key, dtype).float())
    assert torch.equal(flat_v[slots].float(), narrow(value, dtype).float())
    untouched = [i for i in range(blocks * block_size) if i not in slots.tolist()]
    assert not flat_k[untouched].float().any()


def _prompt_logprobs(
    folder: Path, kv_cache_dtype: str, prompt: list[int], chunk: int = 8
) -> tuple[LLMEngine, list[float]]:
    """Teacher-forced logprobs of `prompt`, prefilled in `chunk`-token chunks so each chunk reads the cache."""
    engine = LLMEngine(
        EngineConfig(
            model=str(folder),
            dtype="float32",
            kv_cache_dtype=kv_cache_dtype,
            skip_tokenizer=True,
            kv_cache_memory=1 << 20,
            max_num_batched_tokens=chunk,
            max_num_seqs=chunk,  # the token budget is at least max_num_seqs
        )
    )
    engine.add_request("r", prompt, SamplingParams(max_tokens=1, prompt_logprobs=0))
    logprobs: list[float] = []
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                assert output.prompt_logprobs is not None
                logprobs = [entry.logprob for entry in output.prompt_logprobs[1:] if entry is not None]
    return engine, logprobs


def test_narrow_caches_fit_more_blocks_and_stay_close(tiny_model_dir: Path) -> None:
    prompt = random.Random(0).choices(range(5, 300), k=96)
    reference_engine, reference = _prompt_logprobs(tiny_model_dir, "auto", prompt, chunk=64)
    assert reference_engine.runner.kv_cache.dtype == torch.float32
    errors = {}
    # Measured on this model: largest logprob difference 1e-4 (bf16) and 3.4e-3 (fp8 e4m3).
    for name, bytes_per_entry, tolerance in (("bfloat16", 2, 0.002), ("fp8_e4m3", 1, 0.05)):
        engine, logprobs = _prompt_logprobs(tiny_model_dir, name, prompt, chunk=64)
        assert engine.runner.kv_cache.element_size() == bytes_per_entry
        assert (
            engine.kv_budget.kv_bytes_per_token * (4 // bytes_per_entry)
            == reference_engine.kv_budget.kv_bytes_per_token
        )
        assert engine.kv_budget.num_blocks == reference_engine.kv_budget.num_blocks * (4 // bytes_per_entry)
        errors[name] = max(abs(a - b) for a, b in zip(logprobs, reference, strict=True))
        assert errors[name] < tolerance, errors
    # The narrowing really happened: fp8 drifts further from float32 than bf16 does.
    assert 0 < errors["bfloat16"] < errors["fp8_e4m3"], errors


@pytest.mark.parametrize("name", ["bfloat16", "fp8_e4m3"])
def test_a_narrow_cache_gives_the_same_result_however_the_prompt_is_chunked(
    tiny_model_dir: Path, name: str
) -> None:
    """A prompt prefilled whole attends to its fresh keys as the cache stores them, so it matches chunks that
    read them back from the cache."""
    prompt = random.Random(2).choices(range(5, 300), k=64)
    _, whole = _prompt_logprobs(tiny_model_dir, name, prompt, chunk=128)
    _, chunked = _prompt_logprobs(tiny_model_dir, name, prompt, chunk=8)
    torch.testing.assert_close(torch.tensor(chunked), torch.tensor(whole), rtol=0, atol=1e-5)


def test_fp8_cache_serves_a_batch_with_prefix_sharing_and_copy_on_write(tiny_model_dir: Path) -> None:
    """n > 1 forks share prompt blocks (copy-on-write copies raw fp8 bytes); every sample finishes."""
    engine = LLMEngine(
        EngineConfig(
            model=str(tiny_model_dir), dtype="float32", kv_cache_dtype="fp8", kv_cache_memory=KV_MEMORY
        )
    )
    prompt = random.Random(1).choices(range(5, 300), k=21)
    engine.add_request(
        "a", prompt, SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=12, ignore_eos=True)
    )
    engine.add_request("b", prompt, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    finished = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = [len(c.token_ids) for c in output.outputs]
    assert finished == {"a": [12, 12, 12], "b": [12]}
    assert engine.block_manager.num_free_blocks == engine.kv_budget.num_blocks


def test_greedy_speculative_decoding_is_unchanged_by_a_narrow_cache(tiny_model_dir: Path) -> None:
    """Verification reads the proposals' keys back from the fp8 cache as plain decode does: same tokens."""
    rng = random.Random(3)
    prompts = [rng.choices(range(5, 40), k=24) for _ in range(4)]  # a small alphabet, so n-grams repeat
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    results = []
    for method in (None, "ngram"):
        engine = LLMEngine(
            EngineConfig(
                model=str(tiny_model_dir),
                dtype="float32",
                kv_cache_dtype="fp8",
                kv_cache_memory=KV_MEMORY,
                speculative_method=method,
            )
        )
        for i, prompt in enumerate(prompts):
            engine.add_request(str(i), prompt, params)
        tokens = {}
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    tokens[output.request_id] = output.outputs[0].token_ids
        results.append(tokens)
        if method == "ngram":
            assert engine.stats().spec_decode.get("accepted", 0) > 0, engine.stats().spec_decode
    assert results[0] == results[1]
