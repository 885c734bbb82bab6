"""Tensor parallelism on CPU (gloo, worker processes): a model split over 2 or 4 ranks gives the same greedy
tokens and the same prompt logprobs (to float rounding) as one rank, with chunked prefill, prefix caching and
copy-on-write forks; shapes that do not split are refused before any process starts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch.distributed as dist
from model_factory import build_hf_model

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.models.config import ModelArchConfig
from switchyard.models.tensor_parallel import TensorParallelConfigError, local_config, rank_slices


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 (q/k/v biases, 4 query heads over 2 KV heads)."""
    folder = tmp_path_factory.mktemp("tp-qwen2")
    build_hf_model("qwen2", folder, seed=3)
    return folder


def _run(folder: Path, tp: int, prompts: list[list[int]], **engine: object) -> dict[str, object]:
    config = EngineConfig(
        model=str(folder),
        dtype="float32",
        skip_tokenizer=True,
        kv_cache_memory=2 << 20,
        max_num_batched_tokens=32,  # long prompts prefill in chunks
        max_num_seqs=8,
        tensor_parallel_size=tp,
        **engine,  # type: ignore[arg-type]
    )
    llm = LLMEngine(config)
    try:
        for index, prompt in enumerate(prompts):
            llm.add_request(
                str(index),
                prompt,
                SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True, prompt_logprobs=0),
            )
        # the same first prompt again, later: its blocks come from the prefix cache
        llm.add_request("again", prompts[0], SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True))
        llm.add_request(
            "forks", prompts[1], SamplingParams(n=3, temperature=0.0, max_tokens=6, ignore_eos=True)
        )
        results: dict[str, object] = {}
        while llm.has_unfinished_requests():
            for output in llm.step():
                if output.finished:
                    logprobs = [e.logprob for e in output.prompt_logprobs or [] if e is not None]
                    results[output.request_id] = ([c.token_ids for c in output.outputs], logprobs)
        assert llm.block_manager.num_free_blocks == llm.kv_budget.num_blocks
        return results
    finally:
        llm.close()


@pytest.mark.parametrize("tp", [2, 4])
def test_a_split_model_decodes_as_one_rank_does(qwen_dir: Path, tp: int) -> None:
    rng = random.Random(tp)
    prompts = [rng.choices(range(5, 300), k=rng.randint(5, 70)) for _ in range(4)]
    single = _run(qwen_dir, 1, prompts)
    split = _run(qwen_dir, tp, prompts)
    assert not dist.is_initialized()  # closed: the next engine may form its own group
    assert single.keys() == split.keys()
    for key, (tokens, logprobs) in single.items():
        split_tokens, split_logprobs = split[key]  # type: ignore[misc]
        assert split_tokens == tokens, key
        assert len(split_logprobs) == len(logprobs)
        assert max((abs(a - b) for a, b in zip(logprobs, split_logprobs, strict=True)), default=0) < 1e-4


def test_quantized_ranks_decode_too(qwen_dir: Path) -> None:
    prompts = [random.Random(9).choices(range(5, 300), k=30) for _ in range(2)]
    results = _run(qwen_dir, 2, prompts, quantization="int8")
    assert len(results["0"][0][0]) == 10  # type: ignore[index]


def test_shapes_that_do_not_split_are_refused_before_starting_ranks(qwen_dir: Path) -> None:
    config = ModelArchConfig.from_folder(qwen_dir)
    with pytest.raises(TensorParallelConfigError, match="num_attention_heads 4 is not divisible by"):
        LLMEngine(
            EngineConfig(model=str(qwen_dir), dtype="float32", skip_tokenizer=True, tensor_parallel_size=3)
        )
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="tensor_parallel_size must be >= 1"):
        EngineConfig(model="m", tensor_parallel_size=0)
    # fewer KV heads than ranks: each rank keeps the KV head its query heads read
    slices = [rank_slices(config, rank, 4) for rank in range(4)]
    assert [s.kv_heads for s in slices] == [(0, 1), (0, 1), (1, 2), (1, 2)]
    assert [s.q_heads for s in slices] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert local_config(config, slices[0]).num_key_value_heads == 1
