"""The native decode kernels (switchyard/models/cpu_kernels): each product against an exact reference, the
layers' switch between native and PyTorch paths, and every reason the kernels can be unavailable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_factory import build_hf_model
from torch import nn

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.bf16_linear import NativeBf16Linear
from switchyard.models.cpu_kernels.native_library import (
    DISABLE_ENV,
    NativeKernelsUnavailable,
    build_library,
    cpu_flags,
    load_native_kernels,
    missing_cpu_flags,
    native_kernels,
)
from switchyard.models.llama import RMSNorm
from switchyard.models.packed_linear import PackedLinear
from switchyard.models.quantization.int4_linear import (
    Int4Linear,
    dequantize_int4_groups,
    quantize_int4_groups,
)
from switchyard.models.quantization.int8_linear import Int8Linear

KERNELS = native_kernels()
needs_kernels = pytest.mark.skipif(KERNELS is None, reason="native CPU kernels unavailable on this machine")


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def _linear(out_features: int, in_features: int, bias: bool, dtype: torch.dtype) -> nn.Linear:
    torch.manual_seed(out_features + in_features)
    linear = nn.Linear(in_features, out_features, bias=bias).to(dtype)
    nn.init.normal_(linear.weight, std=0.05)
    if bias:
        nn.init.normal_(linear.bias, std=0.5)
    return linear


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 3, 8, 40])
@pytest.mark.parametrize("bias", [False, True])
def test_int8_product_matches_the_dequantized_weight(dtype: torch.dtype, rows: int, bias: bool) -> None:
    linear = _linear(130, 384, bias, dtype)  # 130 rows: a partial tile of 4
    layer = Int8Linear(linear)
    assert layer.native
    x = torch.randn(rows, 384, dtype=dtype)
    want = x.float() @ (layer.weight.float() * layer.weight_scale[:, None]).t()
    if bias:
        want = want + linear.bias.float()
    got = layer(x)
    assert got.dtype == dtype and got.shape == (rows, 130)
    # activations quantized to int8 per block of 128: about 0.5% relative error, as llama.cpp's q8_0
    assert _relative_error(got, want) < 0.015


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("group_size", [128, 256])
@pytest.mark.parametrize("bias", [False, True])
def test_int4_product_and_dequantization_match_the_grid(
    dtype: torch.dtype, group_size: int, bias: bool
) -> None:
    linear = _linear(70, 512, bias, dtype)
    layer = Int4Linear(linear, group_size=group_size)
    assert layer.native
    codes, table = quantize_int4_groups(linear.weight, group_size)
    weight = dequantize_int4_groups(codes, table, group_size)
    dense = skinny_matmul.int4_dequantize(
        KERNELS, layer.packed_weight, layer.group_scale, layer.group_offset, group_size, torch.float32
    )
    torch.testing.assert_close(dense, weight, rtol=0, atol=1e-6)
    x = torch.randn(2, 512, dtype=dtype)
    want = x.float() @ weight.t()
    if bias:
        want = want + linear.bias.float()
    assert _relative_error(layer(x), want) < 0.015  # decode rows: activations quantized per block
    many = torch.randn(40, 512, dtype=dtype)  # prefill rows: the dequantized weight, no activation rounding
    want_many = many.float() @ weight.to(dtype).float().t() + (linear.bias.float() if bias else 0.0)
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(layer(many).float(), want_many, rtol=tolerance, atol=tolerance)


@needs_kernels
@pytest.mark.parametrize("rows", [1, 5, 8, 9])
def test_bf16_layer_matches_f_linear(rows: int) -> None:
    linear = _linear(100, 320, True, torch.bfloat16)
    layer = NativeBf16Linear(linear)
    x = torch.randn(2, rows, 320, dtype=torch.bfloat16)
    got = layer(x)
    assert got.shape == (2, rows, 100)
    want = x.float() @ linear.weight.float().t() + linear.bias.float()
    assert _relative_error(got, want) < 0.01


@needs_kernels
def test_decode_rows_agree_with_torch_kernels_on_a_three_d_input() -> None:
    linear = _linear(256, 896, False, torch.bfloat16)
    native = Int8Linear(linear)
    x = torch.randn(1, 1, 896, dtype=torch.bfloat16)
    reference = torch.ops.aten._weight_int8pack_mm(
        x[0], native.weight, native.weight_scale.to(torch.bfloat16)
    )
    assert native(x).shape == (1, 1, 256)
    assert _relative_error(native(x)[0], reference) < 0.015


def test_disabled_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "0")
    with pytest.raises(NativeKernelsUnavailable, match=DISABLE_ENV):
        load_native_kernels()
    native_kernels.cache_clear()
    try:
        assert native_kernels() is None
        layer = Int8Linear(_linear(8, 128, False, torch.float32))
        assert not layer.native
        x = torch.randn(1, 128)
        torch.testing.assert_close(layer(x), x @ (layer.weight.float() * layer.weight_scale[:, None]).t())
    finally:
        monkeypatch.delenv(DISABLE_ENV)
        native_kernels.cache_clear()


def test_a_cpu_without_the_instructions_is_named(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n")
    flags = cpu_flags(info)
    assert "avx2" in flags
    assert missing_cpu_flags(flags) == ["avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"]
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_a_missing_or_failing_compiler_is_a_reason_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(NativeKernelsUnavailable, match="does not run"):
        build_library(tmp_path / "cache")
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C\n")
    monkeypatch.delenv("CC")
    with pytest.raises(NativeKernelsUnavailable, match=r"compiling broken\.c failed"):
        build_library(tmp_path / "cache", sources=(broken,))
    assert not list((tmp_path / "cache").glob("*.so"))  # no half-written library left behind


@needs_kernels
def test_the_library_is_built_once_per_source(tmp_path: Path) -> None:
    first = build_library(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert build_library(tmp_path) == first
    assert first.stat().st_mtime_ns == stamp


@needs_kernels
def test_a_latency_tuned_bf16_engine_runs_the_native_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--max-num-seqs` up to MAX_ROWS: bf16 projections on the native kernel; above it, oneDNN's packed ones
    (for a model too large to hold both: here every model is)."""
    monkeypatch.setattr("switchyard.models.packed_linear.DUAL_LAYOUT_MAX_BYTES", 0)
    build_hf_model("llama", tmp_path, seed=5).to(torch.bfloat16).save_pretrained(tmp_path)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    tokens = {}
    for max_num_seqs, kind in ((4, NativeBf16Linear), (64, PackedLinear)):
        engine = LLMEngine(
            EngineConfig(
                model=str(tmp_path),
                dtype="bfloat16",
                skip_tokenizer=True,
                kv_cache_memory=4 << 20,
                max_num_seqs=max_num_seqs,
            )
        )
        layers = [m for m in engine.model.modules() if isinstance(m, NativeBf16Linear | PackedLinear)]
        assert layers and all(isinstance(m, kind) for m in layers)
        engine.add_request("r", [5, 9, 17, 33], params)
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    tokens[max_num_seqs] = output.outputs[0].token_ids
    assert len(tokens[4]) == len(tokens[64]) == 6
    assert tokens[4][0] == tokens[64][0]


@needs_kernels
def test_a_small_model_keeps_both_layouts_at_any_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Projections under DUAL_LAYOUT_MAX_BYTES keep the plain weight (the native decode step) and a packed copy
    (products past MAX_ROWS rows), at `--max-num-seqs` 64; the KV budget counts the copy."""
    from switchyard.models.packed_linear import DUAL_LAYOUT_MAX_BYTES

    build_hf_model("llama", tmp_path, seed=5).to(torch.bfloat16).save_pretrained(tmp_path)
    config = EngineConfig(
        model=str(tmp_path), dtype="bfloat16", skip_tokenizer=True, kv_cache_memory=4 << 20, max_num_seqs=64
    )
    engine = LLMEngine(config)
    layers = [m for m in engine.model.modules() if isinstance(m, NativeBf16Linear | PackedLinear)]
    assert layers and all(isinstance(m, NativeBf16Linear) and m.packed_weight is not None for m in layers)
    assert engine.model._decoder() is not None
    copies = sum(m.weight.numel() * 2 for m in layers)
    assert 0 < copies <= DUAL_LAYOUT_MAX_BYTES
    monkeypatch.setattr("switchyard.models.packed_linear.DUAL_LAYOUT_MAX_BYTES", 0)
    single = LLMEngine(config)
    assert engine.kv_budget.weights_bytes == single.kv_budget.weights_bytes + copies
    rows = torch.randn(20, layers[0].in_features, dtype=torch.bfloat16)  # past MAX_ROWS: the packed copy
    packed = next(m for m in single.model.modules() if isinstance(m, PackedLinear))
    torch.testing.assert_close(layers[0](rows), packed(rows), rtol=0, atol=0)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outputs = []
    for each in (engine, single):
        for index in range(12):  # more sequences than the native rows: both layouts serve steps
            each.add_request(str(index), [5 + index, 9, 17, 33], params)
        done = {}
        while each.has_unfinished_requests():
            done.update({o.request_id: o.outputs[0].token_ids for o in each.step() if o.finished})
        outputs.append(done)
    assert outputs[0].keys() == outputs[1].keys() and all(len(t) == 6 for t in outputs[0].values())


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("hidden", [896, 200])  # 200: a tail of 8 past the 16-wide steps
def test_native_rms_norm_matches_pytorch(dtype: torch.dtype, hidden: int) -> None:
    norm = RMSNorm(hidden, 1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(hidden) + 0.5)
    x = torch.randn(3, hidden, dtype=dtype) * 3
    want = torch.nn.functional.rms_norm(x, (hidden,), norm.weight, 1e-6)
    got = norm(x)
    assert got.dtype == dtype and got.shape == x.shape
    # float accumulation in another order: equal to rounding (one bf16 step at most)
    tolerance = 8e-3 if dtype == torch.bfloat16 else 1e-6
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
    big = torch.randn(200, 512, dtype=dtype)  # past the decode size: PyTorch's kernel
    torch.testing.assert_close(
        RMSNorm(512, 1e-6).to(dtype)(big), torch.nn.functional.rms_norm(big, (512,), None, 1e-6)
    )


@needs_kernels
def test_an_unwritable_cache_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be\n")
    with pytest.raises(NativeKernelsUnavailable, match="cannot write the kernel library"):
        load_native_kernels(blocker / "kernels")
