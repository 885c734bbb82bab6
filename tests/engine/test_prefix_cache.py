"""Prefix cache: reuse of shared prefixes, identical outputs, and eviction that never frees a used block."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from model_factory import build_hf_model
from tokenizer_factory import build_tokenizer

from switchyard import LLM, SamplingParams
from switchyard.engine.block_manager import BlockManager
from switchyard.engine.sampling_params import SamplingParams as Params
from switchyard.engine.sequence import Request, RequestTiming, Sequence

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def engine_llm(folder: Path, prefix_cache: bool, **kwargs: object) -> LLM:
    return LLM(
        str(folder),
        dtype="float32",
        max_model_len=2048,
        kv_cache_memory=64 << 20,
        enable_prefix_caching=prefix_cache,
        max_num_batched_tokens=512,
        **kwargs,
    )


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with room for 2k positions."""
    folder = tmp_path_factory.mktemp("tiny-llama-2k")
    build_hf_model("llama", folder, seed=0, max_position_embeddings=2048)
    build_tokenizer(folder, vocab_size=320)
    return folder


@pytest.fixture(scope="module")
def cached(long_model_dir: Path) -> LLM:
    return engine_llm(long_model_dir, True)


@pytest.fixture(scope="module")
def uncached(long_model_dir: Path) -> LLM:
    return engine_llm(long_model_dir, False)


def shared_prefix_prompts(count: int, prefix_len: int, suffix_len: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(3, 320) for _ in range(prefix_len)]
    return [prefix + [rng.randrange(3, 320) for _ in range(suffix_len)] for _ in range(count)]


def test_outputs_equal_with_and_without_cache(cached: LLM, uncached: LLM) -> None:
    prompts = shared_prefix_prompts(12, 100, 20, seed=1) + shared_prefix_prompts(6, 37, 5, seed=2)
    first = [o.outputs[0].token_ids for o in cached.generate(prompts, GREEDY)]
    again = [o.outputs[0].token_ids for o in cached.generate(prompts, GREEDY)]  # now mostly cache hits
    reference = [o.outputs[0].token_ids for o in uncached.generate(prompts, GREEDY)]
    assert first == reference
    assert again == reference


def test_second_request_reuses_a_1k_prefix(cached: LLM) -> None:
    engine = cached.engine
    first, second = shared_prefix_prompts(2, 1024, 40, seed=3)
    out1 = cached.generate([first], GREEDY)[0]
    assert out1.num_cached_tokens == 0
    engine.add_request("second", second, GREEDY)
    plan = engine.scheduler.schedule()
    (seq, num_new), *_ = plan.scheduled
    # 1024 prefix tokens = 64 full blocks are reused; only the 40-token suffix is prefilled.
    assert seq.request.num_cached_tokens == 1024 >= 1008
    assert num_new == 40
    # Finish the request through the normal loop (undo this manual schedule first).
    engine.scheduler.running.remove(seq)
    engine.block_manager.free(seq)
    seq.num_computed_tokens = 0
    engine.scheduler.waiting.push_front(seq)
    while engine.has_unfinished_requests():
        outputs = engine.step()
    assert outputs[-1].num_cached_tokens == 1024
    assert engine.block_manager.prefix_cache is not None and engine.block_manager.prefix_cache.hit_rate > 0


def test_prompt_logprobs_of_a_cached_prompt_are_computed(cached: LLM, uncached: LLM) -> None:
    # Cached positions have no logits, so a request asking for prompt logprobs must not reuse them.
    (prompt,) = shared_prefix_prompts(1, 64, 8, seed=4)
    scoring = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=1)
    cached.generate([prompt], GREEDY)  # caches the prompt's full blocks
    scored = cached.generate([prompt], scoring)[0]
    reference = uncached.generate([prompt], scoring)[0]
    assert scored.num_cached_tokens == 0
    assert scored.prompt_logprobs is not None and reference.prompt_logprobs is not None
    assert scored.prompt_logprobs[0] is None and all(e is not None for e in scored.prompt_logprobs[1:])
    for ours, theirs in zip(scored.prompt_logprobs[1:], reference.prompt_logprobs[1:], strict=True):
        assert ours is not None and theirs is not None
        assert ours.token_id == theirs.token_id and abs(ours.logprob - theirs.logprob) < 1e-4
    assert cached.generate([prompt], GREEDY)[0].num_cached_tokens == 64  # the cache still serves others


def test_reset_forgets_unused_prefixes_and_frees_their_blocks(long_model_dir: Path) -> None:
    llm = engine_llm(long_model_dir, True)
    manager = llm.engine.block_manager
    prompt = shared_prefix_prompts(1, 200, 8, seed=5)[0]
    first = llm.generate([prompt], GREEDY)[0]
    assert llm.generate([prompt], GREEDY)[0].num_cached_tokens == 192  # 12 full blocks of 16
    free_list_before = len(manager._free)
    freed = llm.reset_prefix_cache()
    assert freed >= 12
    assert len(manager._free) == free_list_before + freed == manager.num_free_blocks == manager.num_blocks
    again = llm.generate([prompt], GREEDY)[0]
    assert again.num_cached_tokens == 0  # computed again, with the same result
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    assert llm.reset_prefix_cache() == 13  # the 13 blocks that run cached (200 prompt + 7 output tokens)


def test_reset_keeps_the_blocks_of_a_running_sequence() -> None:
    manager = BlockManager(8, 4, enable_prefix_cache=True)
    running = _sequence(0, list(range(9)))
    assert manager.allocate_slots(running, 9) == []
    running.num_computed_tokens = 9
    manager.cache_full_blocks(running)
    assert manager.reset_prefix_cache() == 0  # both full blocks are in use
    assert manager.prefix_cache is not None and len(manager.prefix_cache.match(list(range(9)), 2)) == 2
    manager.free(running)
    assert manager.reset_prefix_cache() == 2
    assert manager.num_free_blocks == 8 and manager.prefix_cache.match(list(range(9)), 2) == []
    manager.check_invariants([])


def test_cache_survives_preemption_and_eviction(long_model_dir: Path, uncached: LLM) -> None:
    # A cache of 24 blocks under 12 requests of ~110 tokens: constant eviction and preemption.
    kv_bytes_per_block = 16 * 2 * 2 * 2 * 16 * 4
    small = LLM(
        str(long_model_dir),
        dtype="float32",
        max_model_len=256,
        kv_cache_memory=24 * kv_bytes_per_block,
        max_num_batched_tokens=32,
        max_num_seqs=8,
    )
    prompts = shared_prefix_prompts(12, 48, 40, seed=4)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    got = [o.outputs[0].token_ids for o in small.generate(prompts, params)]
    assert small.engine.scheduler.num_preemptions > 0
    assert got == [o.outputs[0].token_ids for o in uncached.generate(prompts, params)]
    manager = small.engine.block_manager
    assert manager.num_free_blocks == manager.num_blocks
    manager.check_invariants([])


def _sequence(seq_id: int, tokens: list[int]) -> Sequence:
    request = Request(
        request_id=str(seq_id),
        prompt_token_ids=list(tokens),
        params=Params(),
        max_tokens=16,
        eos_token_ids=(),
        timing=RequestTiming(arrival=0.0),
    )
    return Sequence(seq_id=seq_id, request=request, sample_index=0, token_ids=list(tokens))


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    num_blocks=st.integers(2, 12),
    vocab=st.integers(2, 4),
)
def test_eviction_never_frees_a_referenced_block(data: st.DataObject, num_blocks: int, vocab: int) -> None:
    """Random admissions (with prefix matches), growth and frees: a referenced block is never handed out
    again, and every structure stays consistent. A tiny vocabulary makes prefixes collide often."""
    bs = 2
    manager = BlockManager(num_blocks, bs, enable_prefix_cache=True)
    live: list[Sequence] = []
    for step in range(data.draw(st.integers(1, 40))):
        action = data.draw(st.sampled_from(["admit", "grow", "free"]))
        if action == "admit" or not live:
            tokens = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=12))
            seq = _sequence(step, tokens)
            manager.match_prefix(seq)
            remaining = seq.num_tokens - seq.num_computed_tokens
            if manager.allocate_slots(seq, remaining) is None:
                manager.free(seq)
                seq.num_computed_tokens = 0
            else:
                seq.num_computed_tokens += remaining
                manager.cache_full_blocks(seq)
                live.append(seq)
        elif action == "grow":
            seq = live[data.draw(st.integers(0, len(live) - 1))]
            extra = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4))
            before = {b: list(s.block_table) for b, s in enumerate(live)}
            if manager.allocate_slots(seq, len(extra)) is not None:
                seq.token_ids.extend(extra)
                seq.num_computed_tokens += len(extra)
                manager.cache_full_blocks(seq)
            # No other live sequence lost a block to eviction.
            for index, other in enumerate(live):
                if other is not seq:
                    assert other.block_table == before[index]
        else:
            manager.free(live.pop(data.draw(st.integers(0, len(live) - 1))))
        manager.check_invariants(live)
        owned = [b for s in live for b in s.block_table]
        assert all(manager.ref_counts[b] > 0 for b in owned)
    for seq in live:
        manager.free(seq)
    manager.check_invariants([])
    assert manager.num_free_blocks == num_blocks
