"""Weight quantization: each layer kind against its float product, a quantized engine against the float one,
the KV budget the smaller weights free, and quantized checkpoints (loaded when implemented, refused by name
when not)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from greedy_runs import engine_greedy
from model_factory import build_hf_model
from tokenizer_factory import build_tokenizer
from torch import nn

from switchyard.config import EngineConfig
from switchyard.engine_args import QUANTIZATION_NAMES
from switchyard.models.loader import load_model
from switchyard.models.quantization.apply import quantize_model
from switchyard.models.quantization.checkpoint import UnsupportedQuantizationError
from switchyard.models.quantization.int4_linear import Int4Linear
from switchyard.models.quantization.int8_linear import INT_MM_MIN_ROWS, Int8Linear
from switchyard.models.quantization.methods import QUANTIZATION_METHODS, QuantizationSpec

SHAPE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Llama whose projections' input sizes are multiples of int4's group of 128."""
    folder = tmp_path_factory.mktemp("quant-llama")
    build_hf_model("llama", folder, seed=0, **SHAPE)
    build_tokenizer(folder, vocab_size=320)  # for `switchyard quantize`'s calibration text
    return folder


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.detach().float() - want.detach().float()).norm() / want.detach().float().norm())


def test_the_flag_names_are_the_methods() -> None:
    assert QUANTIZATION_NAMES == QUANTIZATION_METHODS
    with pytest.raises(ValueError, match="quantization must be one of"):
        EngineConfig(model="x", quantization="nf4")
    with pytest.raises(ValueError, match="not implemented"):
        QuantizationSpec("fp4")  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [1, 3, INT_MM_MIN_ROWS, 100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_layers_match_the_float_product(rows: int, dtype: torch.dtype) -> None:
    torch.manual_seed(rows)
    linear = nn.Linear(256, 96, bias=True).to(dtype)
    x = torch.randn(rows, 256, dtype=dtype)
    want = linear(x)
    for dynamic in (False, True):
        got = Int8Linear(linear, dynamic_activations=dynamic)(x)
        assert got.dtype == dtype and got.shape == want.shape
        # per-channel int8 weights: ~0.5% error; per-token int8 activations add about as much again
        assert _relative_error(got, want) < (0.03 if dynamic else 0.02)


def test_w8a8_uses_int8_activations_only_for_large_products() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(128, 64, bias=False)
    layer = Int8Linear(linear, dynamic_activations=True)
    weight_only = Int8Linear(linear, dynamic_activations=False)
    small = torch.randn(INT_MM_MIN_ROWS - 1, 128)
    large = torch.randn(INT_MM_MIN_ROWS, 128)
    assert torch.equal(layer(small), weight_only(small))
    assert not torch.equal(layer(large), weight_only(large))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_layers_match_the_float_product(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    linear = nn.Linear(256, 64, bias=False).to(dtype)
    x = torch.randn(5, 256, dtype=dtype)
    got = Int4Linear(linear, group_size=128)(x)
    assert _relative_error(got, linear(x)) < 0.15  # 16 levels per group of 128
    with pytest.raises(ValueError, match="multiple of group_size"):
        Int4Linear(nn.Linear(96, 64), group_size=128)


def test_quantizing_a_model_swaps_every_projection_and_shrinks_its_weights(model_dir: Path) -> None:
    model = load_model(model_dir, "float32")
    report = quantize_model(model, QuantizationSpec("int8"))
    assert report.layers == 4 * 2  # qkv, o, gate_up, down in each of 2 layers
    assert 3.5 < report.bytes_before / report.bytes_after < 4.0  # float32 -> int8, plus the scales
    assert isinstance(model.lm_head, nn.Linear)  # the LM head stays in dtype


def _agreement(reference: list[list[int]], tokens: list[list[int]]) -> float:
    """The share of greedy tokens equal at the same position (every request has max_tokens of them)."""
    pairs = [
        (a, b) for ref, got in zip(reference, tokens, strict=True) for a, b in zip(ref, got, strict=True)
    ]
    return sum(a == b for a, b in pairs) / len(pairs)


def test_a_quantized_engine_mostly_agrees_with_the_float_one(model_dir: Path) -> None:
    rng = random.Random(0)
    prompts = [rng.choices(range(5, 300), k=rng.randint(4, 60)) for _ in range(6)]
    reference_engine, reference = engine_greedy(model_dir, None, prompts)
    for method, floor in (("int8", 0.8), ("w8a8", 0.7), ("int4", 0.3)):
        engine, tokens = engine_greedy(model_dir, method, prompts)
        assert _agreement(reference, tokens) >= floor, method
        # the KV budget is planned after quantizing: its weights are what the engine really holds
        assert engine.kv_budget.weights_bytes < reference_engine.kv_budget.weights_bytes
        assert engine.block_manager.num_free_blocks == engine.kv_budget.num_blocks


def _with_quantization_config(source: Path, target: Path, config: dict) -> Path:
    target.mkdir()
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    raw = json.loads((target / "config.json").read_text())
    raw["quantization_config"] = config
    (target / "config.json").write_text(json.dumps(raw))
    return target


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "gptq bits=3 group_size=128"),
        ({"quant_method": "awq", "bits": 4, "version": "gemv"}, "awq"),
        ({"quant_method": "fp8", "fmt": "e4m3"}, "fp8"),
        ({"quant_method": "bitsandbytes"}, "bitsandbytes"),
        (
            {
                "quant_method": "compressed-tensors",
                "format": "float-quantized",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "float-quantized",
        ),
    ],
)
def test_a_checkpoint_quantized_another_way_is_refused_by_name(
    model_dir: Path, tmp_path: Path, config: dict, named: str
) -> None:
    folder = _with_quantization_config(model_dir, tmp_path / "quantized", config)
    with pytest.raises(UnsupportedQuantizationError, match=named):
        load_model(folder)


def test_switchyard_quantize_writes_a_w8a8_checkpoint_that_serves_as_it_is(
    model_dir: Path, tmp_path: Path
) -> None:
    from safetensors import safe_open

    from switchyard.models.quantization.cli import main as quantize_main

    calibration = tmp_path / "calib.jsonl"
    rng = random.Random(1)
    lines = [json.dumps({"text": " ".join(rng.choice("abcdefgh") * 3 for _ in range(40))}) for _ in range(8)]
    calibration.write_text("\n".join(lines) + "\n")
    out = tmp_path / "w8a8"
    assert quantize_main([str(model_dir), "--calib", str(calibration), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "compressed-tensors"
    with safe_open(str(out / "model.safetensors"), framework="pt") as stored:
        q = stored.get_tensor("model.layers.0.self_attn.q_proj.weight")
        scale = stored.get_tensor("model.layers.0.self_attn.q_proj.weight_scale")
    assert q.dtype == torch.int8 and scale.shape == (q.shape[0], 1)

    # served without --quantization: the checkpoint's own int8 values, exactly
    rng = random.Random(2)
    prompts = [rng.choices(range(5, 300), k=rng.randint(4, 40)) for _ in range(4)]
    engine, tokens = engine_greedy(out, None, prompts)
    layer = engine.model.model.layers[0].self_attn.qkv_proj
    assert isinstance(layer, Int8Linear) and layer.dynamic_activations
    assert torch.equal(layer.weight[: q.shape[0]], q)
    _, reference = engine_greedy(model_dir, None, prompts)
    assert _agreement(reference, tokens) >= 0.6

    # bad input: no calibration for w8a8, an existing output folder, an already quantized source
    assert quantize_main([str(model_dir), "--out", str(tmp_path / "x")]) == 2
    assert quantize_main([str(model_dir), "--method", "int8", "--out", str(out)]) == 2
    assert quantize_main([str(out), "--method", "int8", "--out", str(tmp_path / "y")]) == 2
