"""A mixture's routed experts under quantization: `--quantization` quantizes every expert (not only the attention
and shared-expert projections), the engine then holds what `switchyard plan` counts, and a pre-quantized GPTQ /
AWQ mixture keeps each expert's own int4 codes, checked against transformers on the dequantized weights."""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from greedy_runs import engine_greedy, transformers_greedy
from model_factory import build_hf_model
from prequantized_packers import awq, gptq, write_quantized
from safetensors.torch import save_file

from switchyard.engine.sampling_params import SamplingParams
from switchyard.llm import LLM
from switchyard.models.loader import load_model
from switchyard.models.moe import SparseMoeBlock
from switchyard.models.quantization.apply import quantize_model
from switchyard.models.quantization.int4_linear import Int4Linear
from switchyard.models.quantization.int8_linear import Int8Linear
from switchyard.models.quantization.methods import QuantizationSpec
from switchyard.models.quantization.quantized_experts import QuantizedExperts
from switchyard.plan.cli import main as plan_main

# hidden and every expert's inner size are whole groups of 128, so int4 takes every projection
SHAPES = {
    "mixtral": dict(hidden_size=128, intermediate_size=128),
    "qwen2_moe": dict(
        hidden_size=128, intermediate_size=256, moe_intermediate_size=128, shared_expert_intermediate_size=256
    ),
    "qwen3_moe": dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=128),
}
PROMPTS = [[5, 17, 42, 99, 7], [200, 3, 3, 150, 61, 8, 12, 90], [11, 250]]
MAX_TOKENS = 8
LAYER = {"int8": Int8Linear, "w8a8": Int8Linear, "int4": Int4Linear}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = {}
    for arch, shape in SHAPES.items():
        made[arch] = tmp_path_factory.mktemp(arch)
        build_hf_model(arch, made[arch], seed=7, **shape)
    return made


def _sparse_blocks(model: torch.nn.Module) -> list[SparseMoeBlock]:
    return [module for module in model.modules() if isinstance(module, SparseMoeBlock)]


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize("method", ["int8", "w8a8", "int4"])
@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe"])
def test_quantizing_a_mixture_quantizes_every_routed_expert(
    folders: dict[str, Path], arch: str, method: str
) -> None:
    model = load_model(folders[arch], "float32")
    block = _sparse_blocks(model)[0]
    x = torch.randn(40, 128, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = block(x)
    experts = block.moe.num_experts
    report = quantize_model(model, QuantizationSpec(method))  # type: ignore[arg-type]

    # both layers sparse: qkv and o, each expert's gate/up and down, and Qwen2-MoE's shared expert's two
    assert report.layers == 2 * 2 + 2 * (2 * experts) + (2 * 2 if arch == "qwen2_moe" else 0)
    assert block.experts_gate_up is None and block.experts_down is None  # the float stack is gone
    quantized = block.quantized_experts
    assert isinstance(quantized, QuantizedExperts)
    assert all(isinstance(layer, LAYER[method]) for layer in [*quantized.gate_up, *quantized.down])
    assert not [name for name, _ in model.named_parameters() if "experts" in name]
    assert report.bytes_before / report.bytes_after > 3.0  # float32 -> int8 or int4, plus the scales
    counted = int(block.routed_tokens.sum())
    with torch.no_grad():
        got = block(x)
    # 40 rows route 80 (token, expert) pairs over 4 experts: every expert's prefill path runs
    assert int(block.routed_tokens.sum()) - counted == 40 * block.moe.top_k
    assert _relative_error(got, want) < (0.25 if method == "int4" else 0.03)
    with torch.no_grad():  # decode's few rows take the skinny path where the native kernels are built
        assert _relative_error(block(x[:2]), want[:2]) < (0.25 if method == "int4" else 0.03)


def _planned_weights(folder: Path, quantization: str, capsys: pytest.CaptureFixture[str]) -> int:
    args = [str(folder), "--device", "80GiB", "--dtype", "float32", "--json", "--quantization", quantization]
    assert plan_main(args) == 0
    return int(json.loads(capsys.readouterr().out)["weights_bytes_per_device"])


def test_a_quantized_mixture_engine_agrees_and_holds_what_the_plan_counts(
    folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = folders["qwen3_moe"]
    rng = random.Random(0)
    prompts = [rng.choices(range(5, 300), k=rng.randint(4, 40)) for _ in range(8)]
    _, reference = engine_greedy(folder, None, prompts)
    for method in ("int8", "int4"):
        engine, tokens = engine_greedy(folder, method, prompts)
        # a random tiny model drifts once one token differs: compare each prompt's first token (a swapped or
        # misrouted expert agrees about once in 320)
        agree = sum(ref[0] == got[0] for ref, got in zip(reference, tokens, strict=True)) / len(prompts)
        assert agree >= (0.75 if method == "int8" else 0.5), method
        # the plan counts the experts quantized, scale tables left out (here ~10% in float32)
        planned = _planned_weights(folder, method, capsys)
        assert planned <= engine.kv_budget.weights_bytes < 1.15 * planned, method


def _float_folder(source: Path, reference: dict[str, torch.Tensor], target: Path) -> Path:
    """`source` with its weights replaced by `reference` (for transformers, which has no int4 kernel here)."""
    target.mkdir()
    for path in source.iterdir():
        if path.name != "model.safetensors":
            shutil.copy2(path, target / path.name)
    save_file(
        {name: tensor.contiguous() for name, tensor in reference.items()}, str(target / "model.safetensors")
    )
    return target


def _hf_greedy(folder: Path) -> tuple[list[list[int]], list[list[float]]]:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return transformers_greedy(model, PROMPTS, MAX_TOKENS)


def _serve(folder: Path) -> tuple[LLM, list]:
    llm = LLM(str(folder), dtype="float32", skip_tokenizer=True, kv_cache_memory=4 << 20)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=0)
    return llm, llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)


CHECKPOINTS = {
    "mixtral-gptq": (
        "mixtral",
        gptq(128),
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True},
    ),
    "qwen2_moe-awq": (
        "qwen2_moe",
        awq(64),
        {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm"},
    ),
    "qwen3_moe-gptq-asym": (
        "qwen3_moe",
        gptq(64, symmetric=False),
        {"quant_method": "gptq", "bits": 4, "group_size": 64, "sym": False},
    ),
}


@pytest.mark.usefixtures("exact_cpu_kernels")
@pytest.mark.parametrize("case", list(CHECKPOINTS))
def test_a_prequantized_mixture_serves_each_experts_own_codes(
    folders: dict[str, Path], tmp_path: Path, case: str
) -> None:
    arch, pack, config = CHECKPOINTS[case]
    reference = write_quantized(folders[arch], tmp_path / case, pack, config)
    want_tokens, want_logprobs = _hf_greedy(_float_folder(folders[arch], reference, tmp_path / "dequantized"))
    llm, outputs = _serve(tmp_path / case)
    for output, tokens, logprobs in zip(outputs, want_tokens, want_logprobs, strict=True):
        got = output.outputs[0]
        assert got.token_ids == tokens
        # float32 both sides on the same dequantized values: an expert rounded again to a grid of its own, or
        # its gate and up swapped, moves these by far more (as in the dense pre-quantized tests)
        assert [entry.logprob for entry in got.logprobs] == pytest.approx(logprobs, abs=1e-4)
    for block in _sparse_blocks(llm.engine.model):
        assert isinstance(block.quantized_experts, QuantizedExperts)
        assert all(isinstance(layer, Int4Linear) for layer in block.quantized_experts.gate_up)
        assert block.quantized_experts.gate_up[0].group_size == config["group_size"]


@pytest.mark.usefixtures("exact_cpu_kernels")
def test_experts_a_checkpoint_stores_unquantized_stay_stacked_in_dtype(
    folders: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Checkpoints often leave experts (or MoE layers) out of quantization: their experts are served as stored,
    the quantized projections beside them from their codes."""
    config = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}
    reference = write_quantized(
        folders["qwen3_moe"], tmp_path / "partial", gptq(128), config, keep=lambda name: ".experts." in name
    )
    want_tokens, want_logprobs = _hf_greedy(
        _float_folder(folders["qwen3_moe"], reference, tmp_path / "float")
    )
    with caplog.at_level(logging.WARNING, logger="switchyard.models.quantization.apply"):
        llm, outputs = _serve(tmp_path / "partial")
    assert "16 of 20 projections stay in the model's dtype" in caplog.text  # the experts' 2 x 4 x 2
    assert [output.outputs[0].token_ids for output in outputs] == want_tokens
    got = [[entry.logprob for entry in output.outputs[0].logprobs] for output in outputs]
    assert got == [pytest.approx(row, abs=1e-4) for row in want_logprobs]
    for block in _sparse_blocks(llm.engine.model):
        assert block.quantized_experts is None and block.experts_gate_up is not None
    assert isinstance(llm.engine.model.model.layers[0].self_attn.qkv_proj, Int4Linear)


@pytest.mark.parametrize("arch", ["qwen2_moe", "mixtral"])
def test_smoothing_a_mixture_leaves_its_outputs_unchanged(folders: dict[str, Path], arch: str) -> None:
    """The post-attention norm's factors are folded into the router, every expert's gate/up and the shared
    expert and its gate: in exact arithmetic nothing changes, so float32 logits stay within rounding."""
    from switchyard.models.quantization.smoothing import activation_maxima, smooth, smoothed_groups

    model = transformers.AutoModelForCausalLM.from_pretrained(folders[arch], dtype=torch.float32).eval()
    ids = torch.tensor([PROMPTS[1] * 3])
    with torch.no_grad():
        before = model(input_ids=ids).logits
    experts_before = model.model.layers[1].mlp.experts.gate_up_proj.detach().clone()
    groups = smoothed_groups(model)
    smooth(groups, activation_maxima(model, groups, [ids]), alpha=0.5)
    with torch.no_grad():
        after = model(input_ids=ids).logits
    assert not torch.allclose(model.model.layers[1].mlp.experts.gate_up_proj, experts_before)  # not a no-op
    assert (after - before).abs().max() < 1e-4 * before.abs().max()


@pytest.mark.parametrize("arch", ["qwen2_moe", "mixtral"])
def test_switchyard_quantize_writes_a_mixture_per_expert(
    folders: dict[str, Path], tmp_path: Path, arch: str
) -> None:
    """A w8a8 checkpoint of a mixture: each expert's matrices int8 under the checkpoint's own names, routers
    left in dtype and named in `ignore`, served with no flag from those exact int8 values."""
    from safetensors import safe_open
    from tokenizer_factory import build_tokenizer

    from switchyard.models.quantization.cli import main as quantize_main

    source = tmp_path / "source"
    shutil.copytree(folders[arch], source)
    build_tokenizer(source, vocab_size=320)
    calibration = tmp_path / "calib.txt"
    rng = random.Random(1)
    calibration.write_text(
        "\n".join(" ".join(rng.choice("abcdefgh") * 3 for _ in range(40)) for _ in range(8))
    )
    out = tmp_path / "w8a8"
    assert quantize_main([str(source), "--calib", str(calibration), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert any("gate$" in pattern for pattern in config["ignore"])
    block = "block_sparse_moe" if arch == "mixtral" else "mlp"
    gate_name = "w1" if arch == "mixtral" else "gate_proj"
    with safe_open(str(out / "model.safetensors"), framework="pt") as stored:
        names = set(stored.keys())
        expert_gate = stored.get_tensor(f"model.layers.1.{block}.experts.2.{gate_name}.weight")
        router = stored.get_tensor(f"model.layers.1.{block}.gate.weight")
    assert expert_gate.dtype == torch.int8 and router.dtype != torch.int8
    assert not [name for name in names if "gate_up_proj" in name]  # no fused names leak into the checkpoint

    rng = random.Random(3)
    prompts = [rng.choices(range(5, 300), k=rng.randint(4, 40)) for _ in range(8)]
    engine, tokens = engine_greedy(out, None, prompts)
    experts = _sparse_blocks(engine.model)[1].quantized_experts
    assert isinstance(experts, QuantizedExperts)
    layer = experts.gate_up[2]
    assert isinstance(layer, Int8Linear) and layer.dynamic_activations
    assert torch.equal(layer.weight[: expert_gate.shape[0]], expert_gate)
    _, reference = engine_greedy(source, None, prompts)
    assert sum(ref[0] == got[0] for ref, got in zip(reference, tokens, strict=True)) >= len(prompts) / 2
