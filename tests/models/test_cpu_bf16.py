"""dtype "auto" and weight packing follow whether this CPU computes bf16 natively."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from model_factory import build_hf_model
from torch import nn

from switchyard.config import EngineConfig
from switchyard.engine import builder as builder_module
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.models import cpu_bf16, packed_linear
from switchyard.models.config import ModelArchConfig
from switchyard.models.cpu_bf16 import auto_dtype, cpu_has_native_bf16
from switchyard.models.packed_linear import PackedLinear, can_pack

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize(
    ("checkpoint", "device", "native", "expected"),
    [
        ("float32", CPU, False, "float32"),
        ("float32", CPU, True, "float32"),
        ("bfloat16", CPU, True, "bfloat16"),
        ("bfloat16", CPU, False, "float32"),
        ("float16", CPU, False, "float32"),
        ("float16", CPU, True, "float16"),
        (None, CPU, True, "float32"),
        ("int8", CPU, True, "float32"),
        ("bfloat16", CUDA, False, "bfloat16"),
        ("float16", CUDA, False, "float16"),
    ],
)
def test_auto_dtype(checkpoint: str | None, device: torch.device, native: bool, expected: str) -> None:
    assert auto_dtype(checkpoint, device, native_bf16=native) == expected


def test_the_probe_agrees_with_what_onednn_accepts() -> None:
    """On this very CPU: oneDNN builds packed bf16 weights exactly when the probe says bf16 is native."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN in this torch build")
    linear = nn.Linear(64, 32, bias=False).to(torch.bfloat16)
    if cpu_has_native_bf16():
        packed = PackedLinear(linear)
        x = torch.randn(3, 64, dtype=torch.bfloat16)
        torch.testing.assert_close(packed(x), linear(x))
    else:
        with pytest.raises(RuntimeError):
            PackedLinear(linear)
    assert can_pack(CPU, torch.bfloat16) == cpu_has_native_bf16()
    assert can_pack(CPU, torch.float32) == hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def test_a_bf16_checkpoint_runs_in_float32_without_native_bf16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine widens the checkpoint, packs the float32 weights, and generates as an explicit float32 run."""
    build_hf_model("llama", tmp_path, seed=3).to(torch.bfloat16).save_pretrained(tmp_path)
    assert ModelArchConfig.from_folder(tmp_path).torch_dtype == "bfloat16"
    monkeypatch.setattr(cpu_bf16, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(packed_linear, "cpu_has_native_bf16", lambda: False)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outputs = {}
    for dtype in ("auto", "float32"):
        engine = LLMEngine(
            EngineConfig(model=str(tmp_path), dtype=dtype, skip_tokenizer=True, kv_cache_memory=4 << 20)
        )
        assert engine.dtype == torch.float32
        assert any(isinstance(m, PackedLinear) for m in engine.model.modules()) == can_pack(
            CPU, torch.float32
        )
        engine.add_request("r", [5, 9, 17, 33], params)
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    outputs[dtype] = output.outputs[0].token_ids
    assert outputs["auto"] == outputs["float32"]


def test_an_explicit_bf16_is_kept_with_a_warning_without_native_bf16(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(builder_module, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(packed_linear, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger=builder_module.__name__):
        engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), dtype="bfloat16", kv_cache_memory=4 << 20))
    assert engine.dtype == torch.bfloat16
    assert not any(isinstance(m, PackedLinear) for m in engine.model.modules())
    assert "emulated" in caplog.text
