"""Tensor parallelism on CPU (gloo, worker processes): a model split over 2 or 4 ranks gives the same greedy
tokens and the same prompt logprobs (to float rounding) as one rank, with chunked prefill, prefix caching and
copy-on-write forks; shapes that do not split are refused before any process starts."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from model_factory import build_hf_model
from safetensors import safe_open

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


# Inner widths even over 2 ranks; Qwen2-MoE with a shared expert, Qwen3-MoE with q/k norms.
MIXTURES = {
    "mixtral": {},
    "qwen2_moe": dict(moe_intermediate_size=48, shared_expert_intermediate_size=96),
    "qwen3_moe": {},
}


@pytest.mark.parametrize("arch", list(MIXTURES))
def test_a_split_mixture_decodes_as_one_rank_does(arch: str, tmp_path: Path) -> None:
    """Every rank holds every expert with half its inner width (and half the shared expert's), routes with the
    whole router, and the all-reduced block equals the unsplit one: the same tokens, prompt logprobs to 1e-4."""
    build_hf_model(arch, tmp_path, seed=3, **MIXTURES[arch])
    rng = random.Random(2)
    prompts = [rng.choices(range(5, 300), k=rng.randint(5, 70)) for _ in range(4)]
    single = _run(tmp_path, 1, prompts)
    split = _run(tmp_path, 2, prompts)
    for key, (tokens, logprobs) in single.items():
        split_tokens, split_logprobs = split[key]  # type: ignore[misc]
        assert split_tokens == tokens, key
        assert max((abs(a - b) for a, b in zip(logprobs, split_logprobs, strict=True)), default=0) < 1e-4


def test_a_split_mixture_rank_holds_half_of_each_expert(tmp_path: Path) -> None:
    from switchyard.models.loader import load_model
    from switchyard.models.moe import SparseMoeBlock
    from switchyard.models.tensor_parallel import RankCut

    build_hf_model("qwen2_moe", tmp_path, seed=3, **MIXTURES["qwen2_moe"])
    whole_config = ModelArchConfig.from_folder(tmp_path)
    whole = load_model(tmp_path, "float32")
    cut = RankCut(whole_config, rank_slices(whole_config, 1, 2))
    shard = load_model(tmp_path, "float32", config=whole_config, cut=cut)
    block, full = shard.model.layers[1].mlp, whole.model.layers[1].mlp
    assert isinstance(block, SparseMoeBlock) and isinstance(full, SparseMoeBlock)
    assert block.experts_gate_up is not None and full.experts_gate_up is not None
    assert block.experts_down is not None and full.experts_down is not None
    # rank 1 of 2: the second half of each expert's gate rows and of its up rows, and of its down columns
    gate, up = full.experts_gate_up[:, :48], full.experts_gate_up[:, 48:]
    assert torch.equal(block.experts_gate_up, torch.cat([gate[:, 24:], up[:, 24:]], dim=1))
    assert torch.equal(block.experts_down, full.experts_down[:, :, 24:])
    assert block.shared_expert is not None and full.shared_expert is not None
    assert block.shared_expert.down_proj.weight.shape == (64, 48)
    assert torch.equal(block.gate.weight, full.gate.weight)  # the router is whole on every rank
    assert whole_config.moe is not None
    odd = dataclasses.replace(
        whole_config, moe=dataclasses.replace(whole_config.moe, expert_intermediate_size=50)
    )
    with pytest.raises(
        TensorParallelConfigError, match=r"experts' intermediate size 50 is not divisible by .* 4"
    ):
        rank_slices(odd, 0, 4)


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


class _CountingHandle:
    """A safetensors handle that counts the elements it reads, whole or sliced."""

    def __init__(self, inner: object, reads: dict[str, int]) -> None:
        self._inner = inner
        self._reads = reads

    def keys(self) -> list[str]:
        return self._inner.keys()  # type: ignore[attr-defined, no-any-return]

    def get_tensor(self, name: str) -> torch.Tensor:
        tensor = self._inner.get_tensor(name)  # type: ignore[attr-defined]
        self._reads[name] = self._reads.get(name, 0) + tensor.numel()
        return tensor

    def get_slice(self, name: str) -> object:
        view = self._inner.get_slice(name)  # type: ignore[attr-defined]
        reads = self._reads

        class _Slice:
            def get_shape(self) -> list[int]:
                return view.get_shape()  # type: ignore[no-any-return]

            def get_dtype(self) -> str:
                return view.get_dtype()  # type: ignore[no-any-return]

            def __getitem__(self, index: object) -> torch.Tensor:
                part = view[index]
                reads[name] = reads.get(name, 0) + part.numel()
                return part

        return _Slice()


def test_a_rank_reads_only_its_part_of_each_tensor(qwen_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading rank 1 of 2 reads half of every projection, embedding and head (norms whole), never the whole
    model, and holds exactly those slices of the unsplit model's tensors."""
    from switchyard.engine.parallel.rank_model import load_rank_model
    from switchyard.models import loader

    load = dict(dtype=torch.float32, device=torch.device("cpu"), max_model_len=64, quantization=None)
    whole = load_rank_model(qwen_dir, rank=0, world_size=1, **load)  # type: ignore[arg-type]
    reads: dict[str, int] = {}
    opened = loader._open
    monkeypatch.setattr(loader, "_open", lambda path: _CountingHandle(opened(path), reads))
    shard = load_rank_model(qwen_dir, rank=1, world_size=2, **load)  # type: ignore[arg-type]

    with safe_open(str(qwen_dir / "model.safetensors"), framework="pt") as handle:
        sizes = {name: handle.get_slice(name).get_shape() for name in handle.keys()}  # noqa: SIM118
    for name, shape in sizes.items():
        numel = int(torch.Size(shape).numel())
        assert reads[name] == (numel if "norm" in name else numel // 2), name
    assert sum(reads.values()) < 0.6 * sum(int(torch.Size(s).numel()) for s in sizes.values())

    config = whole.config
    q, kv = config.q_size, config.kv_size
    layer, full = shard.model.layers[0], whole.model.layers[0]
    attention, full_attention = layer.self_attn.block, full.self_attn
    q_rows = slice(q // 2, q)  # rank 1 of 2: the second half of the query heads
    kv_rows = slice(q + kv // 2, q + kv)
    v_rows = slice(q + kv + kv // 2, q + 2 * kv)
    expected = torch.cat([full_attention.qkv_proj.weight[rows] for rows in (q_rows, kv_rows, v_rows)])
    assert torch.equal(attention.qkv_proj.weight, expected)
    assert torch.equal(attention.o_proj.weight, full_attention.o_proj.weight[:, q // 2 :])
    inter = config.intermediate_size
    gate_up = full.mlp.gate_up_proj.weight
    halves = (gate_up[inter // 2 : inter], gate_up[inter + inter // 2 :])
    assert torch.equal(layer.mlp.block.gate_up_proj.weight, torch.cat(halves))
    assert torch.equal(layer.mlp.block.down_proj.weight, full.mlp.down_proj.weight[:, inter // 2 :])
    vocab = config.vocab_size
    assert torch.equal(shard.model.embed_tokens.weight, whole.model.embed_tokens.weight[vocab // 2 :])
