"""The reference tests' machinery (`test_reference`) with attention on the Triton kernel: Switchyard's forward
pass over scattered paged blocks against Hugging Face transformers. On CPU the kernel runs in Triton's
interpreter (float32, a few variants); the gpu-marked tests run every variant compiled on CUDA, in float32
and bf16."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers
from model_factory import build_hf_model
from paged_runner import PagedRunner, greedy_tokens

from switchyard.models import LlamaForCausalLM, load_model
from switchyard.models.attention_backend import triton_available

# The same constants as test_reference (see there for how they were measured).
FP32_ATOL = 1e-4
BF16_ATOL = 0.1
INITIALIZER_RANGE = 0.1
VARIANTS = {
    "llama": ("llama", {}),
    "qwen3-mqa-tied": ("qwen3", {"num_key_value_heads": 1, "tie_word_embeddings": True}),
    "mistral-sliding-window": ("mistral", {"sliding_window": 8}),
}
PROMPT_LENGTHS = (19, 1, 33, 8)
CUDA = torch.cuda.is_available()

pytestmark = pytest.mark.skipif(
    not triton_available() or not (CUDA or os.environ.get("TRITON_INTERPRET") == "1"),
    reason="needs Triton on CUDA, or in interpreter mode on CPU",
)


@dataclass
class Reference:
    hf: transformers.PreTrainedModel
    model: LlamaForCausalLM
    folder: Path
    device: torch.device


def _marks(name: str, device: str) -> list[pytest.MarkDecorator]:
    """CUDA runs every variant; CPU (the interpreter, ~100x slower) runs the sliding-window one by default,
    which covers grouped-query attention and the window, and the others as slow tests."""
    if device == "cuda":
        return [pytest.mark.gpu]
    marks = [pytest.mark.skipif(CUDA, reason="compiled on CUDA instead")]
    return marks if name == "mistral-sliding-window" else [*marks, pytest.mark.slow]


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(
            (name, device),
            id=f"{name}-{device}",
            marks=_marks(name, device),
        )
        for name in VARIANTS
        for device in ("cpu", "cuda")
    ],
)
def ref(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    name, device = request.param
    if device == "cuda" and not CUDA:
        pytest.skip("needs CUDA")
    arch, overrides = VARIANTS[name]
    folder = tmp_path_factory.mktemp(name)
    hf = build_hf_model(arch, folder, initializer_range=INITIALIZER_RANGE, **overrides).to(device)
    return Reference(hf, load_model(folder, dtype="float32", device=device), folder, torch.device(device))


def random_prompts(lengths: tuple[int, ...], seed: int, vocab_size: int = 320) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=generator).tolist() for n in lengths]


@torch.no_grad()
def hf_logits(ref: Reference, tokens: list[int]) -> torch.Tensor:
    return ref.hf(torch.tensor([tokens], device=ref.device)).logits[0].float()


def max_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return (ours.float() - theirs.float()).abs().max().item()


def test_batched_prefill_then_chunked_prefill_match_transformers(ref: Reference) -> None:
    """Prompts prefilled together in one launch, then a prompt prefilled in chunks over its cached blocks."""
    prompts = random_prompts(PROMPT_LENGTHS, seed=1)
    runner = PagedRunner(ref.model, block_size=4, kernel=True)
    ids = [runner.add(p) for p in prompts]
    logits = runner.step(prefill_chunks=[(i, len(p)) for i, p in zip(ids, prompts, strict=True)])
    for seq_id, prompt in zip(ids, prompts, strict=True):
        assert max_error(logits[seq_id], hf_logits(ref, prompt)[-1]) < FP32_ATOL, f"prompt of {len(prompt)}"
    chunked = PagedRunner(ref.model, block_size=4, seed=2, kernel=True)
    seq = chunked.add(prompts[2])
    last = chunked.prefill([seq], chunk_size=5)[seq]
    assert max_error(last, hf_logits(ref, prompts[2])[-1]) < FP32_ATOL


def test_greedy_generation_matches_transformers_generate(ref: Reference) -> None:
    """Batched decodes on the kernel, token-identical to transformers' greedy generate per prompt."""
    new_tokens = 24 if ref.device.type == "cuda" else 5
    prompts = random_prompts((7, 13, 4), seed=9)
    generated = greedy_tokens(PagedRunner(ref.model, block_size=4, kernel=True), prompts, new_tokens)
    for i, prompt in enumerate(prompts):
        output = ref.hf.generate(
            torch.tensor([prompt], device=ref.device),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=ref.device),
            do_sample=False,
            max_new_tokens=new_tokens,
            eos_token_id=None,
            pad_token_id=0,
        )
        assert output[0, len(prompt) :].tolist() == generated[i], f"prompt {i}"


@pytest.mark.gpu
def test_bf16_prefill_matches_transformers_on_cuda(ref: Reference) -> None:
    """bf16 on the compiled kernel: within test_reference's bf16 bound of transformers in float32."""
    if ref.device.type != "cuda":
        pytest.skip("bf16 runs compiled only")
    model = load_model(ref.folder, dtype="bfloat16", device=ref.device)
    prompts = random_prompts(PROMPT_LENGTHS, seed=3)
    runner = PagedRunner(model, block_size=16, kernel=True)
    ids = [runner.add(p) for p in prompts]
    logits = runner.step(prefill_chunks=[(i, len(p)) for i, p in zip(ids, prompts, strict=True)])
    for seq_id, prompt in zip(ids, prompts, strict=True):
        assert max_error(logits[seq_id], hf_logits(ref, prompt)[-1]) < BF16_ATOL
