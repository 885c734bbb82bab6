"""--attention-backend: resolution, and the engine on the Triton kernel (Triton's interpreter on CPU) giving the
SDPA path's tokens through prefix sharing, chunked prefill and batched decodes."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine_args import ATTENTION_BACKEND_NAMES
from switchyard.models.attention_backend import (
    ATTENTION_BACKENDS,
    resolve_attention_backend,
    triton_available,
)

CPU = torch.device("cpu")
needs_interpreter = pytest.mark.skipif(
    not triton_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton in interpreter mode (conftest turns it on without CUDA)",
)


def test_names_and_resolution() -> None:
    assert ATTENTION_BACKENDS == ATTENTION_BACKEND_NAMES
    f32 = torch.float32
    assert resolve_attention_backend("sdpa", CPU, f32, f32, 16) == "sdpa"
    # auto never picks the kernel on CPU, even where Triton's interpreter could run it.
    assert resolve_attention_backend("auto", CPU, f32, f32, 16) == "sdpa"
    # fp8 caches and tiny blocks are the kernel's to refuse: auto falls back, an explicit request fails.
    assert resolve_attention_backend("auto", CPU, f32, torch.float8_e4m3fn, 16) == "sdpa"
    with pytest.raises(ValueError, match="KV cache stored in the model's dtype"):
        resolve_attention_backend("triton", torch.device("cuda"), f32, torch.float8_e4m3fn, 16)
    with pytest.raises(ValueError, match="attention_backend must be one of"):
        resolve_attention_backend("flash", CPU, f32, f32, 16)
    with pytest.raises(ValueError, match="attention_backend must be one of"):
        EngineConfig(model="x", attention_backend="flash")


def test_auto_stays_on_sdpa_on_cpu_without_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert resolve_attention_backend("auto", CPU, torch.float32, torch.float32, 16) == "sdpa"
    with pytest.raises(ValueError, match=r"CUDA|Triton is not installed"):
        resolve_attention_backend("triton", CPU, torch.float32, torch.float32, 16)


def _greedy(folder: Path, backend: str, prompts: list[list[int]]) -> tuple[LLMEngine, list[list[int]]]:
    engine = LLMEngine(
        EngineConfig(
            model=str(folder),
            dtype="float32",
            skip_tokenizer=True,
            attention_backend=backend,
            block_size=8,
            kv_cache_memory=1 << 20,
            max_num_batched_tokens=16,  # prompts of 21 tokens prefill in chunks over cached blocks
            max_num_seqs=4,
        )
    )
    for index, prompt in enumerate(prompts):
        engine.add_request(str(index), prompt, SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))
    done: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                done[output.request_id] = list(output.outputs[0].token_ids)
    return engine, [done[str(i)] for i in range(len(prompts))]


@needs_interpreter
def test_engine_on_the_kernel_matches_sdpa(tiny_model_dir: Path) -> None:
    rng = random.Random(0)
    shared = rng.choices(range(5, 300), k=16)
    prompts = [shared + rng.choices(range(5, 300), k=5), [*shared, 7], rng.choices(range(5, 300), k=3)]
    engine, kernel = _greedy(tiny_model_dir, "triton", prompts)
    assert engine.runner.kernel_group is not None
    _, reference = _greedy(tiny_model_dir, "sdpa", prompts)
    assert kernel == reference
