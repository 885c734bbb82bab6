"""Mixture-of-experts pieces beyond the reference tests: expert stacking at load, the grouped products against
the per-expert loop, the routers' counters, config and checkpoint errors; and the rope scalings (YaRN,
dynamic NTK) that the reference variants alone could pass vacuously."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from model_factory import MOE_ARCHS, TINY_MOE, build_hf_model
from paged_runner import PagedRunner

from switchyard.errors import ModelLoadError
from switchyard.models import load_model
from switchyard.models.moe import SparseMoeBlock

FP32_ATOL = 1e-4
INITIALIZER_RANGE = 0.1


pytestmark = pytest.mark.usefixtures("single_thread")  # tests/models/conftest.py


def prompt_of(length: int, seed: int) -> list[int]:
    return torch.randint(0, 320, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_experts_are_stacked_at_load(arch: str, tmp_path: Path) -> None:
    """Each sparse layer holds its experts as two [experts, out, in] tensors equal to the checkpoint's
    per-expert matrices (gate above up), not as one module per expert."""
    hf = build_hf_model(arch, tmp_path, initializer_range=INITIALIZER_RANGE)
    model = load_model(tmp_path)
    block = model.model.layers[1].mlp
    assert isinstance(block, SparseMoeBlock)
    hf_experts = hf.model.layers[1].mlp.experts
    num_experts = TINY_MOE[arch].get("num_experts") or TINY_MOE[arch]["num_local_experts"]
    assert block.experts_gate_up.shape[0] == block.experts_down.shape[0] == num_experts
    assert torch.equal(block.experts_gate_up, hf_experts.gate_up_proj)
    assert torch.equal(block.experts_down, hf_experts.down_proj)
    assert not [name for name, _ in model.named_modules() if ".experts." in name]


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_grouped_products_equal_the_per_expert_loop(arch: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The grouped matrix product and the fallback (one product per expert over its contiguous rows) agree,
    and both route every token to top_k experts."""
    build_hf_model(arch, tmp_path, initializer_range=INITIALIZER_RANGE)
    block = load_model(tmp_path).model.layers[1].mlp
    assert isinstance(block, SparseMoeBlock)
    x = torch.randn(37, 64, generator=torch.Generator().manual_seed(0))
    grouped = block(x)
    monkeypatch.setattr("switchyard.models.moe._grouped_mm_fits", lambda *_: False)
    looped = block(x)
    assert (grouped - looped).abs().max().item() < 1e-5
    assert int(block.routed_tokens.sum()) == 2 * 37 * block.moe.top_k


def test_routed_token_counters_sum_to_tokens_times_top_k(tmp_path: Path) -> None:
    """After a prefill of 40 tokens and 5 decodes, each sparse layer routed 45 x top_k (token, expert) pairs;
    dense layers have no counter, and a dense model reports none."""
    build_hf_model("qwen2_moe", tmp_path / "moe", initializer_range=INITIALIZER_RANGE, mlp_only_layers=[0])
    model = load_model(tmp_path / "moe")
    runner = PagedRunner(model)
    seq = runner.add(prompt_of(40, seed=1))
    runner.prefill([seq])
    for step in range(5):
        runner.decode({seq: step})
    counts = model.routed_tokens()
    assert counts is not None and counts.shape == (1, 4)  # one sparse layer (layer 1), four experts
    assert int(counts.sum()) == 45 * 2
    assert int((counts > 0).sum()) > 1  # the router spreads tokens, not one expert for all
    model.reset_routed_tokens()
    assert int(model.routed_tokens().sum()) == 0  # type: ignore[union-attr]
    build_hf_model("llama", tmp_path / "dense")
    assert load_model(tmp_path / "dense").routed_tokens() is None


def test_a_missing_expert_names_the_tensor(tmp_path: Path) -> None:
    build_hf_model("mixtral", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_local_experts": 5}))
    with pytest.raises(ModelLoadError, match=r"block_sparse_moe\.experts\.4\.w1\.weight"):
        load_model(tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
    ],
)
def test_inconsistent_moe_configs_are_refused(overrides: dict, message: str, tmp_path: Path) -> None:  # type: ignore[type-arg]
    build_hf_model("qwen3_moe", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **overrides}))
    with pytest.raises(ModelLoadError, match=message):
        load_model(tmp_path)


def test_yarn_is_exercised(tmp_path: Path) -> None:
    """Guards the YaRN reference variants against passing vacuously: the scaling reaches Switchyard's tables
    (with its attention factor) and changes transformers' logits far beyond the tolerance."""
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 64}
    hf = build_hf_model("llama", tmp_path, initializer_range=INITIALIZER_RANGE, rope_parameters=yarn)
    model = load_model(tmp_path)
    assert model.config.rope.rope_type == "yarn"
    assert model.config.rope.attention_factor == pytest.approx(0.1 * torch.log(torch.tensor(8.0)).item() + 1)
    assert model.rotary.cos_table[0, 0].item() == pytest.approx(model.config.rope.attention_factor)
    prompt = prompt_of(33, seed=2)
    scaled = hf(torch.tensor([prompt])).logits[0, -1]
    plain = transformers.LlamaForCausalLM.from_pretrained(
        tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}
    )
    assert (scaled - plain(torch.tensor([prompt])).logits[0, -1]).abs().max().item() > 100 * FP32_ATOL


def test_dynamic_ntk_generates_past_the_trained_context_like_transformers(tmp_path: Path) -> None:
    """Dynamic NTK with a 24-token trained context: 40 greedy tokens after a 12-token prompt run to position 51,
    each past position 24 rotated with the base stretched for its own length, token-identical to transformers'
    generate (which rescales the same way as it decodes). The scaling is live: plain rope picks other tokens."""
    dynamic = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}
    hf = build_hf_model(
        "qwen3_moe",
        tmp_path,
        initializer_range=INITIALIZER_RANGE,
        max_position_embeddings=24,
        rope_parameters=dynamic,
    )
    model = load_model(tmp_path, max_positions=64)
    prompt = prompt_of(12, seed=3)
    expected = hf.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False,
        max_new_tokens=40,
        eos_token_id=None,
        pad_token_id=0,
    )[0, len(prompt) :].tolist()

    def greedy(rope_model: torch.nn.Module) -> list[int]:
        runner = PagedRunner(rope_model)  # type: ignore[arg-type]
        seq = runner.add(prompt)
        logits = runner.prefill([seq])[seq]
        tokens = []
        for _ in range(40):
            tokens.append(int(logits.argmax()))
            logits = runner.decode({seq: tokens[-1]})[seq]
        return tokens

    assert greedy(model) == expected
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "rope_parameters": {"rope_theta": 10000.0}}))
    assert greedy(load_model(tmp_path, max_positions=64)) != expected


def test_tensor_parallelism_splits_each_expert(tmp_path: Path) -> None:
    """Each rank keeps every expert with its slice of the inner width (gate/up rows, down columns); the router
    stays whole. (Decoding split over ranks: tests/engine/test_tensor_parallel.py.)"""
    from switchyard.models.config import ModelArchConfig
    from switchyard.models.tensor_parallel import RankCut, local_config, rank_slices

    build_hf_model("mixtral", tmp_path)
    config = ModelArchConfig.from_folder(tmp_path)
    slices = rank_slices(config, 1, 2)
    assert slices.expert_inner == (64, 128)
    local = local_config(config, slices)
    assert local.moe is not None and local.moe.expert_intermediate_size == 64
    assert local.moe.num_experts == 4
    cut = RankCut(config, slices)
    assert cut.part("model.layers.0.mlp.experts_gate_up", (2, 1)) == (0, 64, 128)
    assert cut.part("model.layers.0.mlp.experts_down", (2, 0)) == (1, 64, 128)
    assert cut.part("model.layers.0.mlp.gate.weight", None) is None
