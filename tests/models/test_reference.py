"""Reference tests: Switchyard's forward pass over the paged KV cache against Hugging Face transformers.

Every architecture the model code claims (Llama, Qwen2, Qwen3, Mistral, and the mixtures of experts Mixtral,
Qwen2-MoE with its shared expert, Qwen3-MoE with normalised top-k) is built as a tiny random model by
transformers, saved, loaded by `load_model` and compared through every step layout the engine produces:
several prompts prefilled in one forward, chunked prefill, batched decodes, decodes mixed with a prefill chunk,
and greedy generation. Variants cover grouped-query and multi-query attention, tied and untied embeddings, the
"linear", "llama3" and "yarn" rope scalings, Mistral's and Mixtral's sliding window shorter than the sequences,
and a Qwen2-MoE with a dense layer beside its sparse one.

The models use initializer_range=0.1 instead of the usual 0.02. At 0.02 attention is nearly uniform and the
logits barely depend on positions: switching rope scaling on changes them by only ~2e-3, too close to the
tolerances here for a wrong rotary or mask to fail reliably. At 0.1 the same change moves them by ~2.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from model_factory import ARCHS, build_hf_model
from paged_runner import PagedRunner, greedy_tokens

from switchyard.models import LlamaForCausalLM, load_model

FP32_ATOL = 1e-4
# Measured over every variant and 20 prompts (logits of std ~0.8, max ~3.7): Switchyard bf16 vs transformers
# bf16 is exactly 0.0 on CPU (the same ATen kernels run in the same order), and either side's bf16 vs
# transformers fp32 is at most 0.053 (median ~0.02), i.e. 1-3 bf16 ulps at logits of 2-4. A correct change
# that fuses or reorders operations (or another device's kernels) can differ from transformers by about as
# much as bf16 differs from fp32, so the bound is 2x that worst case. Structural bugs measured at 1.0-2.5
# (a rope scaling ignored or misapplied, q/k norm or bias dropped, the window off by one), far above it;
# rounding-level mistakes, such as rotary tables built in bf16 (0.03-0.05), are below it and not caught here.
BF16_ATOL = 0.1
INITIALIZER_RANGE = 0.1
SLIDING_WINDOW = 8
LLAMA3_ROPE: dict[str, Any] = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Small enough that head_dim 16's wavelengths (6 to 20000 positions) fall in all three llama3 bands:
    # unscaled (< 16), smoothed (16 to 64) and divided by factor (> 64).
    "original_max_position_embeddings": 64,
}
LINEAR_ROPE: dict[str, Any] = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}
# An original context of 64 puts head_dim 16's correction range (beta_fast 32, beta_slow 1) at dimensions
# [0, 3]: frequency 0 is kept, 1 and 2 are blended, 3 to 7 are interpolated; factor 8 (the tiny shape's 512
# positions over 64) gives an attention factor of 1.21.
YARN_ROPE: dict[str, Any] = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "original_max_position_embeddings": 64,
}

QWEN_WINDOWS: dict[str, Any] = {
    "use_sliding_window": True,
    "sliding_window": SLIDING_WINDOW,
    "max_window_layers": 1,
}

# name -> (arch, config overrides). The tiny shape has 4 query heads and 2 KV heads (GQA) and untied
# embeddings; each architecture also runs as MQA (1 KV head) with tied embeddings.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    **{arch: (arch, {}) for arch in ARCHS},
    **{f"{arch}-mqa-tied": (arch, {"num_key_value_heads": 1, "tie_word_embeddings": True}) for arch in ARCHS},
    "llama-rope-linear": ("llama", {"rope_parameters": LINEAR_ROPE}),
    "llama-rope-llama3": ("llama", {"rope_parameters": LLAMA3_ROPE}),
    "qwen2-rope-llama3": ("qwen2", {"rope_parameters": LLAMA3_ROPE}),
    "mistral-sliding-window": ("mistral", {"sliding_window": SLIDING_WINDOW}),
    "llama-rope-yarn": ("llama", {"rope_parameters": YARN_ROPE}),
    "qwen3_moe-rope-yarn": ("qwen3_moe", {"rope_parameters": YARN_ROPE}),
    "mixtral-sliding-window": ("mixtral", {"sliding_window": SLIDING_WINDOW}),
    # Per-layer windows: Qwen2 windows the layers from max_window_layers on (layer 1 here), Qwen2-MoE the
    # even-indexed ones below it (layer 0 here); the other layer attends to everything.
    "qwen2-layer-windows": ("qwen2", QWEN_WINDOWS),
    "qwen2_moe-layer-windows": ("qwen2_moe", {**QWEN_WINDOWS, "max_window_layers": 2}),
    "qwen3_moe-sliding-window": ("qwen3_moe", {"use_sliding_window": True, "sliding_window": SLIDING_WINDOW}),
    # Qwen2-MoE's layer 0 a dense MLP (mlp_only_layers), layer 1 the expert mixture with its shared expert.
    "qwen2_moe-dense-layer-0": ("qwen2_moe", {"mlp_only_layers": [0]}),
}
# Lengths chosen to straddle block boundaries and, for the sliding-window variant, to exceed the window; one
# single-token prompt exercises the smallest prefill span.
PROMPT_LENGTHS = (19, 1, 33, 8)


pytestmark = pytest.mark.usefixtures("single_thread")  # tests/models/conftest.py


@dataclass
class Reference:
    """One variant saved to a folder, as transformers and as Switchyard (both float32)."""

    name: str
    folder: Path
    hf: transformers.PreTrainedModel
    model: LlamaForCausalLM


@pytest.fixture(scope="module", params=list(VARIANTS))
def ref(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """Each variant is built and loaded once per module; every test of the module reuses it."""
    arch, overrides = VARIANTS[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    hf = build_hf_model(arch, folder, initializer_range=INITIALIZER_RANGE, **overrides)
    return Reference(request.param, folder, hf, load_model(folder, dtype="float32"))


def random_prompts(lengths: tuple[int, ...], seed: int, vocab_size: int = 320) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=generator).tolist() for n in lengths]


@torch.no_grad()
def hf_logits(hf: transformers.PreTrainedModel, tokens: list[int]) -> torch.Tensor:
    """transformers' float32 logits at every position of one unpadded sequence: [len(tokens), vocab]."""
    return hf(torch.tensor([tokens])).logits[0].float()


def max_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return (ours.float() - theirs.float()).abs().max().item()


def test_batched_prefill_matches_transformers_fp32(ref: Reference) -> None:
    """Prompts of different lengths, prefilled together in ONE forward over scattered blocks, give the last
    logits transformers computes for each prompt alone."""
    prompts = random_prompts(PROMPT_LENGTHS, seed=1)
    runner = PagedRunner(ref.model, block_size=4)
    ids = [runner.add(p) for p in prompts]
    logits = runner.step(prefill_chunks=[(i, len(p)) for i, p in zip(ids, prompts, strict=True)])
    for seq_id, prompt in zip(ids, prompts, strict=True):
        expected = hf_logits(ref.hf, prompt)[-1]
        assert max_error(logits[seq_id], expected) < FP32_ATOL, f"prompt of {len(prompt)} tokens"


def test_batched_prefill_matches_transformers_bf16(ref: Reference) -> None:
    """Both sides in bfloat16: Switchyard loaded with dtype "bfloat16", transformers with dtype=torch.bfloat16;
    Switchyard's bf16 logits are also within the same bound of transformers' float32 logits.

    Tolerance BF16_ATOL = 0.1 absolute, on logits of std ~0.8. Measured: 0.0 against transformers bf16 on CPU
    and at most 0.053 against float32, which is bf16's own rounding; 0.1 is twice that, so a reordering of
    correct arithmetic passes while structural bugs (measured 1.0 to 2.5) fail. See BF16_ATOL.
    """
    _, model_cls = ARCHS[VARIANTS[ref.name][0]]
    hf_bf16 = model_cls.from_pretrained(ref.folder, dtype=torch.bfloat16).eval()
    model = load_model(ref.folder, dtype="bfloat16")
    prompts = random_prompts(PROMPT_LENGTHS, seed=2)
    runner = PagedRunner(model, block_size=4)
    ids = [runner.add(p) for p in prompts]
    logits = runner.step(prefill_chunks=[(i, len(p)) for i, p in zip(ids, prompts, strict=True)])
    for seq_id, prompt in zip(ids, prompts, strict=True):
        assert logits[seq_id].dtype == torch.float32
        bf16_error = max_error(logits[seq_id], hf_logits(hf_bf16, prompt)[-1])
        fp32_error = max_error(logits[seq_id], hf_logits(ref.hf, prompt)[-1])
        assert bf16_error < BF16_ATOL and fp32_error < BF16_ATOL, f"prompt of {len(prompt)} tokens"


def test_batched_decode_matches_full_recompute(ref: Reference) -> None:
    """Three sequences decode together for 32 steps through 4-token blocks (so each crosses eight block
    boundaries, at different steps) and scattered blocks. Each step's logits equal a full recompute of the
    sequence so far: transformers' logits over the whole final sequence, whose row i, by causality, is the
    recompute of the prefix ending at i. The last step is also checked against Switchyard's own one-shot
    prefill of the whole sequence."""
    steps = 32
    prompts = random_prompts((5, 11, 2), seed=3)
    continuations = random_prompts((steps,) * len(prompts), seed=4)
    runner = PagedRunner(ref.model, block_size=4)
    ids = [runner.add(p) for p in prompts]
    runner.prefill(ids)
    full = [p + c for p, c in zip(prompts, continuations, strict=True)]
    expected = [hf_logits(ref.hf, tokens) for tokens in full]
    for step in range(steps):
        logits = runner.decode({i: continuations[i][step] for i in ids})
        for i in ids:
            position = len(prompts[i]) + step
            assert max_error(logits[i], expected[i][position]) < FP32_ATOL, f"sequence {i} step {step}"

    recompute = PagedRunner(ref.model, block_size=8, seed=5)
    recompute_ids = [recompute.add(tokens) for tokens in full]
    one_shot = recompute.prefill(recompute_ids)
    for i, j in zip(ids, recompute_ids, strict=True):
        assert max_error(logits[i], one_shot[j]) < 1e-5


def test_mixed_decode_and_prefill_steps(ref: Reference) -> None:
    """Two sequences keep decoding while a third prompt is prefilled in 5-token chunks in the same forwards
    (decode tokens first, then the chunk), after which all three decode together."""
    prompts = random_prompts((6, 3, 23), seed=6)
    continuations = random_prompts((12, 12, 6), seed=7)
    runner = PagedRunner(ref.model, block_size=4)
    first, second, late = (runner.add(p) for p in prompts)
    runner.prefill([first, second])
    expected = [hf_logits(ref.hf, p + c) for p, c in zip(prompts, continuations, strict=True)]
    fed = {first: 0, second: 0, late: 0}
    checked = 0

    def check(logits: dict[int, torch.Tensor]) -> None:
        nonlocal checked
        for seq_id, row in logits.items():
            # Row i of the full-sequence logits is what the step computed at its last cached token.
            position = runner.sequences[seq_id].num_cached - 1
            assert max_error(row, expected[seq_id][position]) < FP32_ATOL, f"sequence {seq_id} at {position}"
            checked += 1

    while runner.sequences[late].num_uncached:
        for seq_id in (first, second):
            runner.append(seq_id, continuations[seq_id][fed[seq_id]])
            fed[seq_id] += 1
        chunk = min(5, runner.sequences[late].num_uncached)
        check(runner.step(decode_ids=[first, second], prefill_chunks=[(late, chunk)]))
    while fed[late] < len(continuations[late]):
        tokens = {s: continuations[s][fed[s]] for s in fed}
        for seq_id in fed:
            fed[seq_id] += 1
        check(runner.decode(tokens))
    assert checked == 5 * 3 + 6 * 3  # five mixed steps, then six batched decodes


@pytest.mark.parametrize("chunk_size", [5, 8])
def test_chunked_prefill_matches_one_shot(ref: Reference, chunk_size: int) -> None:
    """Prompts prefilled in chunks (several sequences' chunks per forward, each later chunk attending to the
    cached context) end with the same logits as a one-shot prefill, and as transformers. Chunk 5 is not a
    multiple of the block size, so chunks start mid-block; chunk 8 starts them on block boundaries."""
    prompts = random_prompts(PROMPT_LENGTHS, seed=8)
    one_shot_runner = PagedRunner(ref.model, block_size=4, seed=1)
    chunked_runner = PagedRunner(ref.model, block_size=4, seed=2)
    one_shot = one_shot_runner.prefill([one_shot_runner.add(p) for p in prompts])
    chunked = chunked_runner.prefill([chunked_runner.add(p) for p in prompts], chunk_size=chunk_size)
    for seq_id, prompt in enumerate(prompts):
        assert max_error(chunked[seq_id], one_shot[seq_id]) < 1e-5, f"prompt of {len(prompt)} tokens"
        assert max_error(chunked[seq_id], hf_logits(ref.hf, prompt)[-1]) < FP32_ATOL


def test_greedy_generation_matches_transformers_generate(ref: Reference) -> None:
    """32 greedy tokens, with the prompts decoding together in one batch, are token-identical to
    transformers' generate(do_sample=False) run per prompt. eos_token_id=None so neither side stops early
    (min_new_tokens would instead mask the EOS logit on the transformers side only)."""
    new_tokens = 32
    prompts = random_prompts((7, 13, 4), seed=9)
    generated = greedy_tokens(PagedRunner(ref.model, block_size=4), prompts, new_tokens)

    for i, prompt in enumerate(prompts):
        output = ref.hf.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=new_tokens,
            eos_token_id=None,
            pad_token_id=0,
        )
        assert output[0, len(prompt) :].tolist() == generated[i], f"prompt {i}"


def legacy_rope_config(config: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The same rope written the ways older transformers did: rope_theta at top level and `rope_scaling`
    holding the type under "rope_type" (>= 4.45) or under "type" (older)."""
    params = dict(config["rope_parameters"])
    theta = params.pop("rope_theta")
    rope_type = params.pop("rope_type")
    base = {k: v for k, v in config.items() if k != "rope_parameters"}
    yield "rope_type", {**base, "rope_theta": theta, "rope_scaling": {"rope_type": rope_type, **params}}
    yield "type", {**base, "rope_theta": theta, "rope_scaling": {"type": rope_type, **params}}


@pytest.mark.parametrize("variant", ["llama-rope-linear", "llama-rope-llama3"])
def test_legacy_rope_scaling_config_loads_the_same(variant: str, tmp_path: Path) -> None:
    """A config.json written with `rope_scaling` (transformers < 5) loads to the same model as the
    `rope_parameters` one transformers 5 writes: same rotary tables, same logits, and transformers agrees."""
    arch, overrides = VARIANTS[variant]
    modern = tmp_path / "modern"
    hf = build_hf_model(arch, modern, initializer_range=INITIALIZER_RANGE, **overrides)
    model = load_model(modern)
    prompt = random_prompts((30,), seed=10)[0]
    expected = hf_logits(hf, prompt)[-1]
    runner = PagedRunner(model)
    reference_logits = runner.prefill([runner.add(prompt)])[0]
    assert max_error(reference_logits, expected) < FP32_ATOL

    modern_config = json.loads((modern / "config.json").read_text())
    for style, legacy_config in legacy_rope_config(modern_config):
        legacy = tmp_path / f"legacy-{style}"
        shutil.copytree(modern, legacy)
        (legacy / "config.json").write_text(json.dumps(legacy_config))
        legacy_model = load_model(legacy)
        assert legacy_model.config.rope == model.config.rope, style
        assert torch.equal(legacy_model.rotary.cos_table, model.rotary.cos_table), style
        legacy_runner = PagedRunner(legacy_model)
        assert torch.equal(legacy_runner.prefill([legacy_runner.add(prompt)])[0], reference_logits), style
        _, model_cls = ARCHS[arch]
        legacy_hf = model_cls.from_pretrained(legacy, dtype=torch.float32).eval()
        assert max_error(hf_logits(legacy_hf, prompt)[-1], expected) < FP32_ATOL, style


@pytest.mark.parametrize(
    ("variant", "expected"), [("qwen2-layer-windows", (None, 8)), ("qwen2_moe-layer-windows", (8, None))]
)
def test_per_layer_windows_are_exercised(
    variant: str, expected: tuple[int | None, ...], tmp_path: Path
) -> None:
    """The Qwen per-layer variants really mix a windowed and a full layer, on both sides: Switchyard's config
    reads the same layer as windowed as transformers' layer_types, and transformers' logits change when the
    window is taken away."""
    arch, overrides = VARIANTS[variant]
    hf = build_hf_model(arch, tmp_path, initializer_range=INITIALIZER_RANGE, **overrides)
    config = load_model(tmp_path).config
    assert tuple(config.window_of(i) for i in range(2)) == expected
    assert [t == "sliding_attention" for t in hf.config.layer_types] == [w is not None for w in expected]
    assert config.release_window is None  # a full-attention layer needs every block
    prompt = random_prompts((max(PROMPT_LENGTHS),), seed=11)[0]
    windowed = hf_logits(hf, prompt)[-1]
    hf.config.layer_types = ["full_attention"] * 2
    for layer in hf.model.layers:
        layer.self_attn.sliding_window = None
    assert max_error(windowed, hf_logits(hf, prompt)[-1]) > 100 * FP32_ATOL


def test_sliding_window_is_exercised(tmp_path: Path) -> None:
    """Guards the sliding-window variant against passing vacuously: the window reaches Switchyard's config,
    the prompts outrun it, and transformers' logits with and without the window differ far beyond FP32_ATOL,
    so the matches above could not hold if either side ignored it. (transformers keeps key j for query i when
    i - window < j <= i, the same rule as Switchyard's masks.)"""
    arch, overrides = VARIANTS["mistral-sliding-window"]
    hf = build_hf_model(arch, tmp_path, initializer_range=INITIALIZER_RANGE, **overrides)
    assert load_model(tmp_path).config.sliding_window == SLIDING_WINDOW
    assert max(PROMPT_LENGTHS) > SLIDING_WINDOW
    prompt = random_prompts((max(PROMPT_LENGTHS),), seed=11)[0]
    windowed = hf_logits(hf, prompt)[-1]
    hf.config.sliding_window = None
    full = hf_logits(hf, prompt)[-1]
    assert max_error(windowed, full) > 100 * FP32_ATOL


@pytest.mark.parametrize("arch", list(ARCHS))
def test_config_without_tie_key_is_untied_like_transformers(arch: str, tmp_path: Path) -> None:
    """A config.json that omits tie_word_embeddings means untied to transformers for all four architectures,
    so a checkpoint with its own lm_head.weight must use it (tying would silently replace the output layer
    with the embeddings)."""
    hf = build_hf_model(arch, tmp_path, initializer_range=INITIALIZER_RANGE, tie_word_embeddings=False)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["tie_word_embeddings"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = load_model(tmp_path)
    assert not model.config.tie_word_embeddings
    prompt = random_prompts((12,), seed=12)[0]
    runner = PagedRunner(model)
    logits = runner.prefill([runner.add(prompt)])[0]
    assert max_error(logits, hf_logits(hf, prompt)[-1]) < FP32_ATOL
