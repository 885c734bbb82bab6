"""Speculative decoding: greedy outputs unchanged, blocks exact, failures isolated, grammars and draft models
(that sampling stays lossless: `test_spec_lossless`)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampler import SamplingRow
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.spec.decoder import SpecDecoder
from switchyard.engine.spec.ngram import NgramProposer
from switchyard.llm import LLM


def mixed_prompts(seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prompts = [[rng.randrange(5, 300) for _ in range(rng.randrange(4, 40))] for _ in range(6)]
    prompts += [[7, 8, 9, 10, 11] * 8, list(range(20, 60)) * 2, [5, 6] * 30]  # copy-heavy: many proposals
    return prompts


def test_ngram_proposer_continues_the_latest_match() -> None:
    proposer = NgramProposer(ngram_min=2, ngram_max=3)
    assert proposer.propose([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3], 3)[0] == [5, 6, 1]
    assert proposer.propose([1, 2, 3, 4], 3)[0] == []
    assert proposer.propose([4, 4, 4], 5)[0] == [4, 4, 4, 4, 4]  # a cycle continues as a cycle
    assert proposer.propose([1, 2, 9, 1, 2], 4)[0] == [9, 1, 2, 9]


@pytest.mark.parametrize("kv_blocks", [None, 14])
def test_greedy_output_is_token_identical_with_speculation(
    tiny_model_dir: Path, kv_blocks: int | None
) -> None:
    """Same tokens with and without speculation, also when a small cache forces preemption."""
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    prompts = mixed_prompts()
    reference = LLM(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=32 << 20)
    expected = [o.outputs[0].token_ids for o in reference.generate(prompts, params)]
    block_bytes = reference.engine.kv_budget.kv_bytes_per_token * reference.engine.kv_budget.block_size
    memory = 32 << 20 if kv_blocks is None else kv_blocks * block_bytes
    spec = LLM(
        model=str(tiny_model_dir),
        dtype="float32",
        max_model_len=512,
        kv_cache_memory=memory,
        speculative_method="ngram",
        spec_max_batch_size=64,
        max_num_batched_tokens=64,
    )
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == expected
    stats_ = spec.engine.spec_decoder.stats  # type: ignore[union-attr]
    assert stats_.accepted > 0 and stats_.emitted > stats_.steps  # it did speculate, and it paid
    if kv_blocks is not None:
        assert spec.engine.scheduler.num_preemptions > 0
    manager = spec.engine.block_manager
    assert manager.num_free_blocks == manager.num_blocks


def test_rollback_keeps_block_accounting_exact(tiny_model_dir: Path) -> None:
    engine = LLMEngine(
        EngineConfig(
            model=str(tiny_model_dir),
            dtype="float32",
            max_model_len=512,
            kv_cache_memory=8 << 20,
            speculative_method="ngram",
            num_speculative_tokens=7,
            spec_max_batch_size=64,
        )
    )
    # Greedy random models fall into loops, which the n-gram proposer then predicts (with rejections too).
    params = SamplingParams(temperature=0, max_tokens=80, ignore_eos=True)
    for i, prompt in enumerate(mixed_prompts(1)):
        engine.add_request(str(i), prompt, params)
    while engine.has_unfinished_requests():
        engine.step()
        live = [s for s in engine.scheduler.running] + list(engine.scheduler.waiting)
        engine.block_manager.check_invariants(live)
        for seq in engine.scheduler.running:
            assert seq.num_draft_tokens == 0
            assert len(seq.block_table) <= engine.block_manager.blocks_for_tokens(seq.num_tokens)
    assert engine.spec_decoder is not None and engine.spec_decoder.stats.proposed > 0
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, logit_bias={50: 5.0}),
        SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, repetition_penalty=1.3),
        SamplingParams(temperature=0, max_tokens=30, min_tokens=30, stop_token_ids=[8]),
    ],
    ids=["logit_bias", "repetition_penalty", "min_tokens"],
)
def test_greedy_verification_sees_the_adjusted_logits(tiny_model_dir: Path, params: SamplingParams) -> None:
    """Greedy drafts are checked against the token plain decoding picks: the argmax after logit_bias,
    penalties and min_tokens suppression, not the raw argmax."""
    prompts = [[7, 8, 9, 10, 11] * 8, list(range(20, 60)) * 2, [5, 6] * 30]
    common = dict(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=32 << 20)
    expected = [o.outputs[0].token_ids for o in LLM(**common).generate(prompts, params)]  # type: ignore[arg-type]
    spec = LLM(**common, speculative_method="ngram", spec_max_batch_size=64)  # type: ignore[arg-type]
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == expected
    assert spec.engine.spec_decoder is not None and spec.engine.spec_decoder.stats.accepted > 0


def test_requests_that_need_plain_decoding_fall_back(tiny_model_dir: Path) -> None:
    llm = LLM(model=str(tiny_model_dir), dtype="float32", speculative_method="ngram", spec_max_batch_size=64)
    prompt = [[7, 8, 9] * 10]
    llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20, logprobs=2, ignore_eos=True))
    llm.generate(prompt, SamplingParams(temperature=1.0, n=3, max_tokens=20, ignore_eos=True))
    assert llm.engine.spec_decoder is not None and llm.engine.spec_decoder.stats.proposed == 0


def test_batched_verification_leaves_each_request_its_own_outcome(tiny_model_dir: Path) -> None:
    """All sequences' drafts are verified in one sampling batch: a seeded request with penalties draws the
    same tokens alone and beside greedy and other sampled requests, and the greedy ones match plain decoding."""
    seeded = SamplingParams(
        temperature=0.8, top_p=0.9, presence_penalty=0.5, seed=7, max_tokens=40, ignore_eos=True
    )
    greedy = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, logit_bias={5: 2.0})
    other = SamplingParams(temperature=1.0, top_k=20, max_tokens=40, ignore_eos=True)
    prompts = mixed_prompts(3)

    def spec_llm() -> LLM:
        return LLM(
            model=str(tiny_model_dir), dtype="float32", speculative_method="ngram", spec_max_batch_size=64
        )

    alone = spec_llm().generate([prompts[6]], seeded)[0].outputs[0].token_ids
    plain = LLM(model=str(tiny_model_dir), dtype="float32")
    expected_greedy = [o.outputs[0].token_ids for o in plain.generate(prompts[:6], greedy)]
    llm = spec_llm()
    batch = llm.generate(prompts, [greedy] * 6 + [seeded] + [other] * 2)
    assert [o.outputs[0].token_ids for o in batch[:6]] == expected_greedy
    assert batch[6].outputs[0].token_ids == alone
    assert llm.engine.spec_decoder is not None and llm.engine.spec_decoder.stats.accepted > 0


def test_a_request_whose_verification_fails_fails_alone(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault in one sequence's verification fails the batched verdict; each sequence is then verified alone,
    so that request gets an error and the others finish as plain decoding would."""
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    prompts = mixed_prompts()
    plain = LLM(model=str(tiny_model_dir), dtype="float32")
    expected = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    faulty = len(prompts) - 1  # copy-heavy, so it speculates
    original = SpecDecoder._sampling_rows

    def rows(seq: Any, drafts: list[int]) -> list[SamplingRow]:
        if seq.request.request_id == str(faulty):
            raise RuntimeError("injected fault")
        return original(seq, drafts)

    monkeypatch.setattr(SpecDecoder, "_sampling_rows", staticmethod(rows))
    engine = LLMEngine(
        EngineConfig(
            model=str(tiny_model_dir), dtype="float32", speculative_method="ngram", spec_max_batch_size=64
        )
    )
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, params)
    finished = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                finished[int(output.request_id)] = output
    assert "injected fault" in (finished[faulty].error or "")
    for i, tokens in enumerate(expected):
        if i != faulty:
            assert finished[i].error is None and finished[i].outputs[0].token_ids == tokens
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_speculation_with_a_grammar_keeps_outputs_valid_and_identical(tiny_model_dir: Path) -> None:
    import json

    import jsonschema

    from switchyard.engine.structured.params import StructuredOutputsParams

    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"enum": ["ab", "cd"]}, "maxItems": 30}},
        "required": ["items"],
    }
    spec_params = StructuredOutputsParams(json=schema)
    prompts = mixed_prompts(2)
    common = dict(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=32 << 20)
    plain = LLM(**common)  # type: ignore[arg-type]
    spec = LLM(**common, speculative_method="ngram", spec_max_batch_size=64)  # type: ignore[arg-type]
    greedy = SamplingParams(temperature=0, max_tokens=150, structured_outputs=spec_params)
    expected = [o.outputs[0].token_ids for o in plain.generate(prompts, greedy)]
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, greedy)] == expected
    sampled = [
        SamplingParams(temperature=1.0, seed=i, max_tokens=150, structured_outputs=spec_params)
        for i in range(len(prompts))
    ]
    for output in spec.generate(prompts, sampled):
        completion = output.outputs[0]
        if completion.finish_reason == "stop":
            jsonschema.validate(json.loads(completion.text), schema)
    stats_ = spec.engine.spec_decoder.stats  # type: ignore[union-attr]
    assert stats_.accepted > 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_drafts_that_complete_the_grammar_verify(tiny_model_dir: Path, temperature: float) -> None:
    """A proposal may end with the grammar's stop token; the bonus position after it has no grammar state to
    mask with, and must not fail the request."""
    from switchyard.engine.structured.params import StructuredOutputsParams

    llm = LLM(
        model=str(tiny_model_dir),
        dtype="float32",
        max_model_len=256,
        kv_cache_memory=8 << 20,
        speculative_method="ngram",
    )
    yes = llm.tokenizer.encode("yes", add_special_tokens=False)
    eos = llm.engine.eos_token_ids[0]
    # The bias makes "y" the first output token; the n-gram (5, 6, y) then proposes the rest of the prompt's
    # "yes" and its EOS, which completes the choice.
    params = SamplingParams(
        temperature=temperature,
        seed=0,
        max_tokens=10,
        logit_bias={yes[0]: 100},
        structured_outputs=StructuredOutputsParams(choice=["yes", "no"]),
    )
    output = llm.generate([[5, 6, *yes, eos, 5, 6]], params)[0]
    assert output.error is None
    assert output.outputs[0].text == "yes" and output.outputs[0].finish_reason == "stop"
    assert llm.engine.spec_decoder is not None and llm.engine.spec_decoder.stats.proposed > 0


@pytest.fixture(scope="module")
def other_draft_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A different random model with the tiny tokenizer's vocabulary: a poor draft (mostly rejected)."""
    from model_factory import build_hf_model

    folder = tmp_path_factory.mktemp("draft")
    build_hf_model("llama", folder, seed=7, num_hidden_layers=1)
    return folder


@pytest.mark.parametrize("draft", ["self", "other"])
def test_draft_model_greedy_output_is_identical(
    tiny_model_dir: Path, other_draft_dir: Path, draft: str
) -> None:
    params = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    prompts = mixed_prompts(3)
    common = dict(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=32 << 20)
    expected = [o.outputs[0].token_ids for o in LLM(**common).generate(prompts, params)]  # type: ignore[arg-type]
    draft_dir = tiny_model_dir if draft == "self" else other_draft_dir
    spec = LLM(
        **common,  # type: ignore[arg-type]
        speculative_method="draft",
        speculative_model=str(draft_dir),
        num_speculative_tokens=3,
        spec_max_batch_size=64,
    )
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == expected
    decoder = spec.engine.spec_decoder
    assert decoder is not None and decoder.draft is not None
    if draft == "self":  # the target drafting for itself is always right
        assert decoder.stats.accepted == decoder.stats.proposed > 0
    else:
        assert decoder.stats.accepted < decoder.stats.proposed
    assert decoder.draft.num_shadows == 0
    assert decoder.draft.block_manager.num_free_blocks == decoder.draft.block_manager.num_blocks


def draft_llm(target: Path, draft: Path, mask_drafts: bool = True) -> LLM:
    """The target speculating with a draft model (512-token context, 32 MiB of KV)."""
    return LLM(
        model=str(target),
        dtype="float32",
        max_model_len=512,
        kv_cache_memory=32 << 20,
        speculative_method="draft",
        speculative_model=str(draft),
        spec_max_batch_size=64,
        spec_mask_drafts=mask_drafts,
    )


def test_draft_model_serves_seeded_sampled_requests(tiny_model_dir: Path, other_draft_dir: Path) -> None:
    """The draft samples a seeded request's proposals from that request's own generator."""
    llm = draft_llm(tiny_model_dir, other_draft_dir)
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=20, ignore_eos=True)
    outputs = [llm.generate([[7, 8, 9] * 10], params)[0].outputs[0] for _ in range(2)]
    assert outputs[0].finish_reason == "length" and len(outputs[0].token_ids) == 20
    assert outputs[0].token_ids == outputs[1].token_ids
    assert llm.engine.spec_decoder is not None and llm.engine.spec_decoder.stats.proposed > 0


def test_a_sampled_draft_the_grammar_forbids_is_verified_and_rejected(
    tiny_model_dir: Path, other_draft_dir: Path
) -> None:
    """A poor draft, unmasked, proposes tokens the grammar forbids. For sampled requests the proposal keeps
    such a token as its last, so verification rejects it and draws from the residual (max(0, p - q)); drawing
    from p alone, as a cut proposal did, biases the output (p = (0.5, 0.5, 0) over a, b, c with c forbidden
    and q = (0.5, 0, 0.5): a comes out with probability 0.75 instead of 0.5)."""
    import jsonschema

    from switchyard.engine.structured.params import StructuredOutputsParams

    schema = {"type": "array", "items": {"enum": ["ab", "cd", "ef"]}, "minItems": 4, "maxItems": 6}
    llm = draft_llm(tiny_model_dir, other_draft_dir, mask_drafts=False)
    params = [
        SamplingParams(
            temperature=1.0, seed=i, max_tokens=60, structured_outputs=StructuredOutputsParams(json=schema)
        )
        for i in range(6)
    ]
    outputs = llm.generate([[7, 8, 9] * 4] * 6, params)
    for output in outputs:
        assert output.error is None
        jsonschema.validate(json.loads(output.outputs[0].text), schema)
    stats_ = llm.engine.spec_decoder.stats  # type: ignore[union-attr]
    assert stats_.forbidden_drafts > 0 and stats_.proposed > stats_.accepted
    again = llm.generate([[7, 8, 9] * 4], params[0])[0]
    assert again.outputs[0].token_ids == outputs[0].outputs[0].token_ids, "seeded output stays reproducible"


def test_a_draft_sampled_under_the_grammar_proposes_only_what_it_allows(
    tiny_model_dir: Path, other_draft_dir: Path
) -> None:
    """Masked by the request's grammar, the draft proposes nothing the grammar forbids, more of its drafts are
    accepted than unmasked, greedy output stays the target's, and the grammar is left where it was."""
    import jsonschema

    from switchyard.engine.structured.params import StructuredOutputsParams

    schema = {"type": "array", "items": {"enum": ["ab", "cd", "ef"]}, "minItems": 4, "maxItems": 6}
    structured = StructuredOutputsParams(json=schema)
    prompts = [[7, 8, 9] * 4, [20, 21, 22, 23] * 3, [5, 6] * 6]
    greedy = SamplingParams(temperature=0, max_tokens=60, structured_outputs=structured)
    plain = LLM(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=32 << 20)
    expected = [o.outputs[0].token_ids for o in plain.generate(prompts, greedy)]
    sampled = [
        SamplingParams(temperature=1.0, seed=i, max_tokens=60, structured_outputs=structured)
        for i in range(8)
    ]
    stats = {}
    for masked in (True, False):
        llm = draft_llm(tiny_model_dir, other_draft_dir, mask_drafts=masked)
        assert [o.outputs[0].token_ids for o in llm.generate(prompts, greedy)] == expected
        for output in llm.generate([[7, 8, 9] * 4] * 8, sampled):
            assert output.error is None
            jsonschema.validate(json.loads(output.outputs[0].text), schema)
        assert llm.engine.spec_decoder is not None
        stats[masked] = llm.engine.spec_decoder.stats
        grammar_stats = llm.engine.structured_outputs.stats
        # Verification applies the masks the draft filled for the same grammar states instead of refilling.
        assert (grammar_stats.reused_rows > 0) == masked
    assert stats[True].forbidden_drafts == 0 < stats[False].forbidden_drafts
    assert stats[True].acceptance_rate > stats[False].acceptance_rate, (stats[True], stats[False])


def test_a_full_draft_cache_skips_proposals_instead_of_failing(tiny_model_dir: Path) -> None:
    """Identical prompts share the target's prefix blocks but not the draft's (its cache, of the same block
    count, has no prefix sharing): shadows that do not all fit must get no proposals, not fail the step."""
    # A block: 16 tokens x (target + same-size draft) x K/V x 2 layers x 2 KV heads x 16 dims x float32.
    per_block = 16 * 2 * (2 * 2 * 2 * 16 * 4)
    common = dict(model=str(tiny_model_dir), dtype="float32", max_model_len=256)
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    prompts = [list(range(20, 60))] * 4
    plain = LLM(**common, kv_cache_memory=32 << 20)  # type: ignore[arg-type]
    expected = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    spec = LLM(
        **common,  # type: ignore[arg-type]
        kv_cache_memory=13 * per_block,
        speculative_method="draft",
        speculative_model=str(tiny_model_dir),
        spec_max_batch_size=8,
    )
    assert spec.engine.block_manager.num_blocks == 13
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == expected
    decoder = spec.engine.spec_decoder
    assert decoder is not None and decoder.draft is not None and decoder.stats.accepted > 0
    assert decoder.draft.block_manager.num_free_blocks == 13


def test_draft_shares_the_kv_memory_budget_and_is_packed(tiny_model_dir: Path, other_draft_dir: Path) -> None:
    """--kv-cache-memory pays for the draft's cache too: each block holds the target's KV and the draft's."""
    from switchyard.engine.memory import kv_bytes_per_token, model_bytes
    from switchyard.models.config import ModelArchConfig
    from switchyard.models.loader import load_model
    from switchyard.models.packed_linear import PackedLinear, can_pack

    memory = 6 << 20
    common = dict(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=memory)
    plain = LLM(**common).engine.kv_budget  # type: ignore[arg-type]
    engine = LLM(**common, speculative_method="draft", speculative_model=str(other_draft_dir)).engine  # type: ignore[arg-type]
    budget = engine.kv_budget
    draft_per_token = kv_bytes_per_token(ModelArchConfig.from_folder(other_draft_dir), torch.float32)
    assert budget.draft_kv_bytes_per_token == draft_per_token > 0
    unpacked = load_model(other_draft_dir, torch.float32, torch.device("cpu"))
    assert budget.draft_weights_bytes == model_bytes(unpacked) > 0  # counted before packing
    per_block = (budget.kv_bytes_per_token + draft_per_token) * budget.block_size
    assert budget.num_blocks == memory // per_block < plain.num_blocks
    assert budget.kv_cache_bytes <= memory
    assert engine.spec_decoder is not None and engine.spec_decoder.draft is not None
    assert engine.spec_decoder.draft.block_manager.num_blocks == budget.num_blocks
    assert "draft" in budget.describe()
    if can_pack(torch.device("cpu"), torch.float32):  # the draft's decode is memory-bound too
        assert any(isinstance(m, PackedLinear) for m in engine.spec_decoder.draft.model.modules())
