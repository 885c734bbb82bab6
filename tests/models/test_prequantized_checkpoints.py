"""Pre-quantized Hugging Face checkpoints: GPTQ and AWQ folders packed here from the formats' documentation,
compressed-tensors int4 and fp8 packed by the `compressed-tensors` package itself. Each is checked against its
own dequantized weights, and served through `switchyard.llm.LLM` against transformers running those dequantized
weights in float32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from greedy_runs import transformers_greedy
from model_factory import build_hf_model
from prequantized_packers import PROJECTIONS, awq, compressed, compressed_config, gptq, write_quantized
from safetensors.torch import load_file, save_file

from switchyard.engine.sampling_params import SamplingParams
from switchyard.llm import LLM
from switchyard.models.quantization.checkpoint import UnsupportedQuantizationError, checkpoint_scheme
from switchyard.models.quantization.int4_linear import Int4Linear
from switchyard.models.quantization.int8_linear import Int8Linear

SHAPE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2)
PROMPTS = [[5, 17, 42, 99, 7], [200, 3, 3, 150, 61, 8, 12, 90], [11, 250]]
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("prequant-llama")
    build_hf_model("llama", folder, seed=3, **SHAPE)
    return folder


def hf_greedy(source: Path, reference: dict[str, torch.Tensor]) -> tuple[list[list[int]], list[list[float]]]:
    """transformers on the dequantized weights, in float32: greedy tokens and their logprobs."""
    model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    model.load_state_dict(reference, strict=False)
    return transformers_greedy(model, PROMPTS, MAX_TOKENS)


CASES = {
    "gptq-v1-sym-g128": (gptq(128), {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}),
    "gptq-v2-asym-g64": (
        gptq(64, symmetric=False, v2=True),
        {"quant_method": "gptq", "bits": 4, "group_size": 64, "sym": False, "checkpoint_format": "gptq_v2"},
    ),
    "gptq-v1-asym-channel": (
        gptq(-1, symmetric=False),
        {"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": False},
    ),
    "gptq-act-order": (
        gptq(64, act_order=True),
        {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": True},
    ),
    "gptq-8bit": (gptq(128, bits=8), {"quant_method": "gptq", "bits": 8, "group_size": 128}),
    "awq-g128": (awq(128), {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}),
    "awq-g64": (awq(64), {"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "version": "GEMM"}),
    "ct-int4-group-sym": (
        compressed("group"),
        compressed_config(
            {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128},
            "pack-quantized",
        ),
    ),
    "ct-int4-channel-asym": (
        compressed("channel", symmetric=False),
        compressed_config(
            {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "channel"}, "pack-quantized"
        ),
    ),
    "ct-fp8-dynamic": (
        compressed("channel", bits=8, kind="float"),
        compressed_config(
            {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"},
            "float-quantized",
            {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token", "dynamic": True},
        ),
    ),
    "ct-fp8-tensor": (
        compressed("tensor", bits=8, kind="float"),
        compressed_config(
            {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor"}, "float-quantized"
        ),
    ),
}
KEPT_AS_INT4 = {"gptq-v1-sym-g128", "gptq-v2-asym-g64", "gptq-v1-asym-channel", "awq-g128", "awq-g64"}
KEPT_AS_INT4 |= {"ct-int4-group-sym", "ct-int4-channel-asym"}


@pytest.mark.usefixtures("exact_cpu_kernels")
@pytest.mark.parametrize("case", list(CASES))
def test_a_prequantized_checkpoint_serves_its_own_weights(source: Path, tmp_path: Path, case: str) -> None:
    pack, config = CASES[case]
    folder = tmp_path / case
    reference = write_quantized(source, folder, pack, config)
    original = load_file(str(source / "model.safetensors"))
    for name, dequantized in reference.items():  # the packer is faithful: within a quantization step
        if name.rsplit(".", 2)[-2] in PROJECTIONS:
            error = (dequantized - original[name]).abs().max() / original[name].abs().max()
            assert error < 0.2, name

    llm = LLM(str(folder), dtype="float32", skip_tokenizer=True, kv_cache_memory=4 << 20)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=0)
    outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
    want_tokens, want_logprobs = hf_greedy(source, reference)
    for output, tokens, logprobs in zip(outputs, want_tokens, want_logprobs, strict=True):
        got = output.outputs[0]
        assert got.token_ids == tokens
        # float32 on both sides, the same dequantized values: what differs is the summation order of the
        # kernels and the int4 table's (8 - zero) * scale rounding, ~1e-6 (measured 5e-7); a wrong packing
        # order or GPTQ zero offset fails this test (checked by breaking each in the loader)
        assert [entry.logprob for entry in got.logprobs] == pytest.approx(logprobs, abs=1e-4)

    qkv = llm.engine.model.model.layers[0].self_attn.qkv_proj
    assert isinstance(qkv, Int4Linear) == (case in KEPT_AS_INT4)
    if case not in KEPT_AS_INT4:  # act-order groups, 8-bit GPTQ and fp8: dequantized to the model's dtype
        assert not isinstance(qkv, Int4Linear | Int8Linear)


def test_the_checkpoint_codes_are_kept_exactly(source: Path, tmp_path: Path) -> None:
    """The int4 layer holds the checkpoint's grid: its product is the dequantized weight's, in bf16 too."""
    pack, config = CASES["gptq-v1-asym-channel"]
    folder = tmp_path / "gptq"
    reference = write_quantized(source, folder, pack, config)
    llm = LLM(str(folder), dtype="bfloat16", skip_tokenizer=True, kv_cache_memory=4 << 20)
    down = llm.engine.model.model.layers[1].mlp.down_proj
    assert isinstance(down, Int4Linear)
    x = torch.randn(3, down.in_features)
    want = x @ reference["model.layers.1.mlp.down_proj.weight"].t()
    got = down(x.to(torch.bfloat16)).float()
    assert float((got - want).norm() / want.norm()) < 0.01  # bf16 activations and table, not re-quantization


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bitsandbytes"),
        ({"quant_method": "exl2", "bits": 4}, "exl2"),
        ({"quant_method": "gptq", "bits": 4, "is_marlin_format": True}, "marlin"),
        ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "gptq bits=3"),
        ({"quant_method": "awq", "bits": 4, "version": "gemv"}, "version=gemv"),
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),
        (
            compressed_config(
                {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
                "int-quantized",
                {"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": False},
            ),
            "static activation scales",
        ),
        (
            compressed_config(
                {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
                "float-quantized",
            ),
            "float-quantized",
        ),
        (
            compressed_config(
                {"num_bits": 4, "type": "float", "strategy": "tensor_group"}, "nvfp4-pack-quantized"
            ),
            "nvfp4",
        ),
    ],
)
def test_other_schemes_are_refused_by_name(tmp_path: Path, config: dict, named: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": config}))
    with pytest.raises(UnsupportedQuantizationError, match=named):
        checkpoint_scheme(tmp_path)


@pytest.mark.parametrize(
    ("case", "planned"),
    [
        ("gptq-v1-sym-g128", "int4"),
        ("awq-g128", "int4"),
        ("ct-int4-group-sym", "int4"),
        ("ct-fp8-tensor", "none"),
    ],
)
def test_the_planner_counts_what_the_engine_holds_for_a_prequantized_folder(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, planned: str
) -> None:
    from switchyard.plan.cli import main as plan_main

    folder = tmp_path / case
    folder.mkdir()
    raw = json.loads((source / "config.json").read_text())
    raw["quantization_config"] = CASES[case][1]
    (folder / "config.json").write_text(json.dumps(raw))
    assert plan_main([str(folder), "--device", "80GiB"]) == 0
    assert f"quantization {planned}," in capsys.readouterr().out
    assert plan_main([str(folder), "--device", "80GiB", "--quantization", "int8"]) == 0
    assert "quantization int8," in capsys.readouterr().out


def test_a_packed_projection_missing_a_tensor_is_a_load_error(source: Path, tmp_path: Path) -> None:
    from switchyard.errors import ModelLoadError
    from switchyard.models.loader import load_model

    pack, config = CASES["awq-g128"]
    folder = tmp_path / "awq"
    write_quantized(source, folder, pack, config)
    state = load_file(str(folder / "model.safetensors"))
    del state["model.layers.1.mlp.down_proj.qzeros"]
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"'model.layers.1.mlp.down_proj.qzeros' is missing"):
        load_model(folder)


@pytest.mark.parametrize("packed_dim", [0, 1])
def test_unpacking_inverts_the_compressed_tensors_packer(packed_dim: int) -> None:
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    from switchyard.models.quantization.int4_formats import unpack_int32

    signed = torch.randint(-8, 8, (24, 40), dtype=torch.int8, generator=torch.Generator().manual_seed(0))
    packed = pack_to_int32(signed, 4, packed_dim=packed_dim)
    assert torch.equal(unpack_int32(packed, 4, dim=packed_dim), signed.to(torch.int32) + 8)
