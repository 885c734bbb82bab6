"""The native decode step (models/native_decode.py, cpu_kernels/decode_layers.c): every layer of a decode step
in one call, against the operator-by-operator path on the same inputs, and the steps and models it declines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from model_factory import build_hf_model

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.models.cpu_kernels.native_library import native_kernels
from switchyard.models.llama import LlamaForCausalLM
from switchyard.models.native_decode import NativeDecoder

needs_kernels = pytest.mark.skipif(native_kernels() is None, reason="native CPU kernels unavailable here")

# Whole 128-input blocks for int8 and int4; 8 query heads on 2 KV heads of 32; q/k/v biases (Qwen2).
SHAPE: dict[str, Any] = dict(
    hidden_size=256, intermediate_size=384, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2
)


# Mixtures with expert widths of whole 128-input blocks (int4's group), Qwen2-MoE with its shared expert.
MIXTURES: dict[str, dict[str, Any]] = {
    "qwen3_moe": dict(moe_intermediate_size=128, head_dim=32),  # q/k norms too
    "qwen2_moe": dict(moe_intermediate_size=128, shared_expert_intermediate_size=256),
    "mixtral": dict(intermediate_size=128),
    "qwen3": dict(head_dim=32),  # dense, with q/k norms
}


def _engine(folder: Path, quantization: str | None, max_num_seqs: int = 8, **extra: Any) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=str(folder),
            dtype="bfloat16",
            skip_tokenizer=True,
            kv_cache_memory=8 << 20,
            max_num_seqs=max_num_seqs,
            quantization=quantization,
            **extra,
        )
    )


def _decoding(engine: LLMEngine, prompts: list[list[int]]) -> None:
    """Every prompt past its prefill and one decode step in."""
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    for index, prompt in enumerate(prompts):
        engine.add_request(f"r{index}", prompt, params)
    while engine.scheduler.num_waiting or any(seq.in_prefill for seq in engine.scheduler.running):
        engine.step()
    engine.step()


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def _next_forward_inputs(engine: LLMEngine) -> tuple[Any, ...]:
    """The arguments of the model's forward in the engine's next step (which runs)."""
    found = _step_forward_inputs(engine)
    assert found is not None, "the step ran no forward"
    return found


def _step_forward_inputs(engine: LLMEngine) -> tuple[Any, ...] | None:
    """Runs one engine step; the arguments of its model forward, None when it ran none."""
    model = engine.model
    captured: list[tuple[Any, ...]] = []
    original = model.forward

    def spy(*args: Any) -> torch.Tensor:
        captured.append(args)
        return original(*args)

    model.forward = spy  # type: ignore[method-assign]
    try:
        engine.step()
    finally:
        del model.forward
    return captured[0] if captured else None


def _both_paths(
    model: LlamaForCausalLM, inputs: tuple[Any, ...], routed: dict[bool, torch.Tensor] | None = None
) -> dict[bool, tuple[torch.Tensor, list]]:
    """The forward's output and the KV caches it leaves, with the native step and without; each from the same
    caches (the step rewrites this step's slots only). `routed` receives, per path, the rows each mixture
    layer's router sent to each expert in that forward."""
    input_ids, positions, kv_caches, metadata = inputs
    before = [(k.clone(), v.clone()) for k, v in kv_caches]
    results = {}
    for native in (False, True):
        for (k, v), (k0, v0) in zip(kv_caches, before, strict=True):
            k.copy_(k0)
            v.copy_(v0)
        model.native_decode = native
        counted = model.routed_tokens()
        hidden = model(input_ids, positions, kv_caches, metadata)
        if routed is not None and counted is not None:
            routed[native] = model.routed_tokens() - counted
        results[native] = (hidden, [(k.clone(), v.clone()) for k, v in kv_caches])
    model.native_decode = True
    return results


@needs_kernels
@pytest.mark.parametrize("quantization", [None, "int8", "w8a8", "int4"])
@pytest.mark.parametrize("prompt_lens", [[37], [5, 70, 19]])
def test_the_native_step_matches_the_operators(
    tmp_path: Path, quantization: str | None, prompt_lens: list[int]
) -> None:
    """One sequence and several of different lengths (different block-table widths): the same keys and values
    written, and final hidden states equal up to rounding (attention sums its floats in another order)."""
    build_hf_model("qwen2", tmp_path, seed=3, **SHAPE).to(torch.bfloat16).save_pretrained(tmp_path)
    engine = _engine(tmp_path, quantization)
    _decoding(engine, [[(7 * i + n) % 300 + 1 for i in range(n)] for n in prompt_lens])
    inputs = _next_forward_inputs(engine)
    decoder = engine.model._decoder()
    assert decoder is not None
    assert decoder.accepts(engine.model.model.embed_tokens(inputs[0]), inputs[2], inputs[3])
    results = _both_paths(engine.model, inputs)
    (want, want_caches), (got, got_caches) = results[False], results[True]
    # the first layer's keys and values come from the same inputs: bit for bit; later layers' from hidden
    # states that differ by rounding
    assert torch.equal(want_caches[0][0], got_caches[0][0]) and torch.equal(
        want_caches[0][1], got_caches[0][1]
    )
    for (want_k, want_v), (got_k, got_v) in zip(want_caches, got_caches, strict=True):
        assert _relative_error(got_k, want_k) < 2e-2 and _relative_error(got_v, want_v) < 2e-2
    assert _relative_error(got, want) < 2e-2  # observed 0.3-0.8%; a wrong head or row is O(1)


@needs_kernels
@pytest.mark.parametrize("quantization", [None, "int8", "int4"])
@pytest.mark.parametrize("arch", list(MIXTURES))
def test_mixtures_and_qk_norms_match_the_operators(
    tmp_path: Path, arch: str, quantization: str | None
) -> None:
    """Expert mixtures (stacked bf16 experts, or one int8 / int4 layer per expert), their shared expert, and
    q/k norms, in the one native call: the same experts chosen for every row, the same counters, and hidden
    states and caches equal up to rounding."""
    build_hf_model(arch, tmp_path, seed=3, **{**SHAPE, **MIXTURES[arch]}).to(torch.bfloat16).save_pretrained(
        tmp_path
    )
    engine = _engine(tmp_path, quantization)
    _decoding(engine, [[(7 * i + n) % 300 + 1 for i in range(n)] for n in (5, 70, 19)])
    inputs = _next_forward_inputs(engine)
    decoder = engine.model._decoder()
    assert decoder is not None
    assert decoder.accepts(engine.model.model.embed_tokens(inputs[0]), inputs[2], inputs[3])
    routed: dict[bool, torch.Tensor] = {}
    results = _both_paths(engine.model, inputs, routed)
    (want, want_caches), (got, got_caches) = results[False], results[True]
    if arch != "qwen3":  # 3 rows x top-2 experts in each of 2 layers, the same experts on both paths
        assert torch.equal(routed[True], routed[False]) and int(routed[True].sum()) == 2 * 3 * 2
    if arch in ("qwen2_moe", "mixtral"):  # no q/k norms: the first layer's keys and values bit for bit
        assert torch.equal(want_caches[0][0], got_caches[0][0])
    # with q/k norms over several rows, PyTorch's norm rounds twice where the native one rounds once
    for (want_k, want_v), (got_k, got_v) in zip(want_caches, got_caches, strict=True):
        assert _relative_error(got_k, want_k) < 2e-2 and _relative_error(got_v, want_v) < 2e-2
    assert _relative_error(got, want) < 2e-2  # a wrong expert, weight or head is O(1)


@needs_kernels
def test_a_single_row_with_qk_norms_writes_the_operators_keys_exactly(tmp_path: Path) -> None:
    """One row: the operator path's q/k norm is the native one too, so the first layer's cache is bit-exact."""
    build_hf_model("qwen3_moe", tmp_path, seed=8, **{**SHAPE, **MIXTURES["qwen3_moe"]}).to(
        torch.bfloat16
    ).save_pretrained(tmp_path)
    engine = _engine(tmp_path, "int8")
    _decoding(engine, [list(range(1, 41))])
    results = _both_paths(engine.model, _next_forward_inputs(engine))
    assert torch.equal(results[False][1][0][0], results[True][1][0][0])
    assert _relative_error(results[True][0], results[False][0]) < 2e-2


@needs_kernels
@pytest.mark.parametrize("arch", ["qwen2", "mixtral"])
def test_greedy_tokens_are_those_of_the_operator_path(tmp_path: Path, arch: str) -> None:
    """A whole generation, native step on and off: the same tokens (a random model's logits are close calls, so
    a handful of steps, several sequences at once). The mixture's experts and routers run the same products
    on both paths."""
    shape = {**SHAPE, **MIXTURES.get(arch, {})}
    build_hf_model(arch, tmp_path, seed=4, **shape).to(torch.bfloat16).save_pretrained(tmp_path)
    engine = _engine(tmp_path, "int8")
    tokens: dict[bool, dict[str, list[int]]] = {}
    for native in (False, True):
        engine.model.native_decode = native
        engine.reset_prefix_cache()
        params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
        for index, length in enumerate((9, 33, 4)):
            engine.add_request(f"r{index}", list(range(3, 3 + length)), params)
        done: dict[str, list[int]] = {}
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    done[output.request_id] = list(output.outputs[0].token_ids)
        tokens[native] = done
    assert tokens[True] == tokens[False]
    assert all(len(t) == 8 for t in tokens[True].values())


def _verify_step_inputs(engine: LLMEngine, prompts: list[list[int]]) -> tuple[Any, ...]:
    """The forward inputs of a step that only verifies drafts (each sequence's last token and its drafts)."""
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    for index, prompt in enumerate(prompts):
        engine.add_request(f"spec{index}", prompt, params)
    for _ in range(40):
        inputs = _step_forward_inputs(engine)
        if inputs is None:
            continue
        metadata = inputs[3]
        chunks = len(metadata.prefills) + (metadata.verify is not None)
        if chunks and metadata.num_decode_tokens == 0 and inputs[0].shape[0] == 4 * len(prompts):
            return inputs
    raise AssertionError("no verification step in 40 steps")


@needs_kernels
@pytest.mark.parametrize("quantization", [None, "int8"])
@pytest.mark.parametrize("sequences", [1, 2])
def test_verification_chunks_match_the_operators(
    tmp_path: Path, quantization: str | None, sequences: int
) -> None:
    """A speculative verification step in the one call: each row of a chunk (one sequence's: the runner's
    prefill way; two: the batched verification) attends as a decode of its own length, which is the chunk's
    causal mask. Hidden states and keys equal to rounding. The model drafts for itself, so every step verifies."""
    build_hf_model("qwen2", tmp_path, seed=3, **SHAPE).to(torch.bfloat16).save_pretrained(tmp_path)
    engine = _engine(
        tmp_path,
        quantization,
        speculative_method="draft",
        speculative_model=str(tmp_path),
        num_speculative_tokens=3,
    )
    inputs = _verify_step_inputs(
        engine, [[(7 * i + n) % 300 + 1 for i in range(n)] for n in (37, 70)][:sequences]
    )
    assert (inputs[3].verify is not None) == (sequences > 1)
    decoder = engine.model._decoder()
    assert decoder is not None
    assert decoder.accepts(engine.model.model.embed_tokens(inputs[0]), inputs[2], inputs[3])
    results = _both_paths(engine.model, inputs)
    (want, want_caches), (got, got_caches) = results[False], results[True]
    assert torch.equal(want_caches[0][0], got_caches[0][0])  # the first layer's keys: the same inputs
    for (want_k, want_v), (got_k, got_v) in zip(want_caches, got_caches, strict=True):
        assert _relative_error(got_k, want_k) < 2e-2 and _relative_error(got_v, want_v) < 2e-2
    assert _relative_error(got, want) < 2e-2  # a row attending past its position is O(1) off


@needs_kernels
def test_speculation_stays_lossless_through_the_native_step(tmp_path: Path) -> None:
    """Verified rows are computed as plain decodes are, row for row: greedy output with drafts equals greedy
    output without them, every step native."""
    build_hf_model("qwen2", tmp_path, seed=4, **SHAPE).to(torch.bfloat16).save_pretrained(tmp_path)
    prompt = [(7 * i) % 300 + 1 for i in range(29)]
    outputs = []
    for spec in ({}, {"speculative_method": "draft", "speculative_model": str(tmp_path)}):
        engine = _engine(tmp_path, "int8", num_speculative_tokens=4, **spec)
        engine.add_request("r", prompt, SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    outputs.append(list(output.outputs[0].token_ids))
    assert outputs[0] == outputs[1] and len(outputs[0]) == 40


@needs_kernels
def test_steps_it_does_not_take_go_through_the_operators(tmp_path: Path) -> None:
    """More decodes than the kernels' rows, with a prefill chunk too or not: declined, and the forward still
    gives the operator path's result."""
    build_hf_model("qwen2", tmp_path, seed=5, **SHAPE).to(torch.bfloat16).save_pretrained(tmp_path)
    engine = _engine(tmp_path, "int8", max_num_seqs=16)
    _decoding(engine, [[i + 1 for i in range(6 + n)] for n in range(10)])
    inputs = _next_forward_inputs(engine)
    decoder = engine.model._decoder()
    assert decoder is not None
    assert inputs[0].shape[0] == 10
    assert not decoder.accepts(engine.model.model.embed_tokens(inputs[0]), inputs[2], inputs[3])
    results = _both_paths(engine.model, inputs)
    assert torch.equal(results[True][0], results[False][0])
    engine.add_request("late", [1, 2, 3, 4, 5], SamplingParams(temperature=0.0, max_tokens=2))
    mixed = _next_forward_inputs(engine)
    assert mixed[3].prefills
    assert not decoder.accepts(engine.model.model.embed_tokens(mixed[0]), mixed[2], mixed[3])


@needs_kernels
@pytest.mark.parametrize(
    ("arch", "overrides", "engine_options"),
    [
        ("mistral", {"sliding_window": 16}, {}),
        ("qwen2", {}, {"max_num_seqs": 64}),  # bf16 on oneDNN's packed weights: no native layout
        ("qwen2_moe", MIXTURES["qwen2_moe"], {"max_num_seqs": 64}),  # the same for attention, shared expert
    ],
    ids=["sliding-window", "packed-bf16", "packed-bf16-mixture"],
)
def test_models_it_does_not_take_keep_the_operators(
    tmp_path: Path,
    arch: str,
    overrides: dict[str, Any],
    engine_options: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the packed cases stand for models too large to keep the plain layout beside the packed one
    monkeypatch.setattr("switchyard.models.packed_linear.DUAL_LAYOUT_MAX_BYTES", 0)
    build_hf_model(arch, tmp_path, seed=6, **{**SHAPE, **overrides}).to(torch.bfloat16).save_pretrained(
        tmp_path
    )
    engine = _engine(tmp_path, None, **engine_options)
    assert NativeDecoder.for_model(engine.model) is None
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    engine.add_request("r", [1, 2, 3, 4], params)
    while engine.has_unfinished_requests():
        engine.step()
