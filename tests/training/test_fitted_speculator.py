"""The speculator proposer with a speculator fitted by the training package's trainer (`train_speculator`):
greedy outputs unchanged under batching, chunked prefill and preemption, seeded sampling reproducible, grammar
masks kept, per-request opt-out. Moved from tests/engine/test_speculator.py, which keeps the tests that need no
trained speculator (and `speculating_llm`, shared here)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from switchyard.engine.sampling_params import SamplingParams
from switchyard.errors import ModelLoadError
from switchyard.llm import LLM
from switchyard_training.data import TokenizedExample
from switchyard_training.train_speculator import (
    SpeculatorRecipe,
    agreement,
    fit_speculator,
    load_target,
    new_speculator,
    target_batch,
)
from tests.engine.test_speculator import speculating_llm


def prompts(count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(5, 300) for _ in range(rng.randrange(4, 40))] for _ in range(count)]


@pytest.fixture(scope="module")
def fitted_speculator(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A speculator trained for a few seconds on the tiny model's own greedy continuations, which it then
    guesses well but not perfectly: verification meets full, partial and no acceptance."""
    llm = LLM(model=str(tiny_model_dir), dtype="float32", max_model_len=512)
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    train_prompts = prompts(48, seed=100)
    outputs = [o.outputs[0].token_ids for o in llm.generate(train_prompts, params, use_tqdm=False)]
    examples = [
        TokenizedExample(ids=p + o, loss_mask=[False] * len(p) + [True] * len(o))
        for p, o in zip(train_prompts, outputs, strict=True)
    ]
    torch.manual_seed(0)
    target = load_target(tiny_model_dir, torch.float32)
    target.requires_grad_(False)
    speculator = new_speculator(target, num_steps=3)
    batches = [examples[i : i + 8] for i in range(0, len(examples), 8)] * 100
    recipe = SpeculatorRecipe(minutes=2.0, lr=1e-2, warmup_steps=5)
    fit_speculator(speculator, target, batches, recipe, max_steps=len(batches), progress=False)
    per_step, _, _ = agreement(speculator, target_batch(target, examples[:16], 3))
    assert per_step[0] > 0.5, per_step  # it learned something from the hidden states
    folder = tmp_path_factory.mktemp("speculator")
    speculator.save(folder)
    return folder


@pytest.mark.parametrize("kv_blocks", [None, 14])
def test_greedy_output_is_identical_with_the_speculator(
    tiny_model_dir: Path, fitted_speculator: Path, kv_blocks: int | None
) -> None:
    """Same tokens with and without speculation over mixed prompts in one batch, with prefill chunked, and
    with a cache small enough to force preemption (the hidden state of a preempted sequence goes stale)."""
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    batch = prompts(8, seed=7)
    reference = LLM(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=32 << 20)
    expected = [o.outputs[0].token_ids for o in reference.generate(batch, params, use_tqdm=False)]
    block_bytes = reference.engine.kv_budget.kv_bytes_per_token * reference.engine.kv_budget.block_size
    memory = 32 << 20 if kv_blocks is None else kv_blocks * block_bytes
    spec = speculating_llm(
        tiny_model_dir, fitted_speculator, kv_cache_memory=memory, max_num_batched_tokens=64
    )
    assert [o.outputs[0].token_ids for o in spec.generate(batch, params, use_tqdm=False)] == expected
    decoder = spec.engine.spec_decoder
    assert decoder is not None and decoder.speculator is not None
    stats = decoder.stats
    assert stats.accepted > 0 and stats.emitted > 1.5 * stats.steps  # it guessed, and it paid
    assert stats.by_accepted.get(0, 0) > 0 and stats.by_accepted.get(3, 0) > 0  # rejections and full runs
    if kv_blocks is not None:
        assert spec.engine.scheduler.num_preemptions > 0
    manager = spec.engine.block_manager
    assert manager.num_free_blocks == manager.num_blocks
    assert decoder.speculator.num_states == 0  # finished sequences' states are released


def test_seeded_sampled_requests_reproduce_with_the_speculator(
    tiny_model_dir: Path, fitted_speculator: Path
) -> None:
    """A seeded request gives the same tokens alone and in a batch with others (its own generator draws the
    proposals and the verdicts)."""
    spec = speculating_llm(tiny_model_dir, fitted_speculator)
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=40, ignore_eos=True)
    batch = prompts(4, seed=8)
    alone = spec.generate(batch[:1], params, use_tqdm=False)[0].outputs[0].token_ids
    together = spec.generate(batch, params, use_tqdm=False)[0].outputs[0].token_ids
    assert alone == together and len(alone) == 40


def test_a_speculator_given_as_a_draft_model_is_refused_with_the_method_to_use(
    tiny_model_dir: Path, fitted_speculator: Path
) -> None:
    with pytest.raises(ModelLoadError, match="--speculative-method speculator"):
        LLM(
            model=str(tiny_model_dir),
            dtype="float32",
            speculative_method="draft",
            speculative_model=str(fitted_speculator),
        )


def test_greedy_speculation_under_a_json_schema_stays_identical_and_valid(
    tiny_model_dir: Path, fitted_speculator: Path
) -> None:
    """Under a grammar the speculator drafts through the masked path (each guess drawn under the grammar's
    mask): outputs equal plain decoding's and parse against the schema."""
    from switchyard.engine.structured.params import StructuredOutputsParams

    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"enum": ["ab", "cd"]}, "maxItems": 20}},
        "required": ["items"],
    }
    params = SamplingParams(
        temperature=0, max_tokens=120, structured_outputs=StructuredOutputsParams(json=schema)
    )
    batch = prompts(4, seed=11)
    plain = LLM(model=str(tiny_model_dir), dtype="float32", max_model_len=512)
    expected = [o.outputs[0] for o in plain.generate(batch, params, use_tqdm=False)]
    spec = speculating_llm(tiny_model_dir, fitted_speculator, spec_lookup_below=0.0)
    got = [o.outputs[0] for o in spec.generate(batch, params, use_tqdm=False)]
    assert [o.token_ids for o in got] == [o.token_ids for o in expected]
    for output in got:
        if output.finish_reason == "stop":
            assert set(json.loads(output.text)) == {"items"}
    decoder = spec.engine.spec_decoder
    assert decoder is not None and decoder.stats.proposed > 0 and decoder.stats.forbidden_drafts == 0


def test_a_request_can_opt_out_of_speculation(tiny_model_dir: Path, fitted_speculator: Path) -> None:
    """`speculative=False` decodes that request plainly (no proposal is made for it), beside others that
    speculate, with the same tokens either way."""
    spec = speculating_llm(tiny_model_dir, fitted_speculator)
    batch = prompts(2, seed=12)
    on = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    off = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, speculative=False)
    decoder = spec.engine.spec_decoder
    assert decoder is not None
    alone_off = spec.generate(batch[:1], off, use_tqdm=False)[0].outputs[0].token_ids
    assert decoder.stats.proposed == 0
    mixed = spec.generate(batch, [off, on], use_tqdm=False)
    assert mixed[0].outputs[0].token_ids == alone_off
    assert 0 < decoder.stats.steps <= 29  # only the second request's steps verified proposals
