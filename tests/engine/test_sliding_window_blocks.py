"""KV block accounting under a sliding window: blocks wholly outside the window are released as a sequence
grows, so its memory stops growing at the window, and releasing them changes no output."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_factory import build_hf_model
from tokenizer_factory import build_tokenizer

from switchyard import LLM, SamplingParams
from switchyard.engine.engine import LLMEngine
from switchyard.errors import InvalidRequestError

WINDOW = 16
BLOCK_SIZE = 4
PROMPT = [7, 19, 3, 250, 41, 8, 77, 12, 5, 301, 64]


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-mistral-window")
    build_hf_model("mistral", folder, seed=5, sliding_window=WINDOW, initializer_range=0.1)
    build_tokenizer(folder, vocab_size=320)
    return folder


def engine_for(folder: Path, **overrides: object) -> LLM:
    args: dict[str, object] = {
        "dtype": "float32",
        "max_model_len": 512,
        "kv_cache_memory": 4 << 20,
        "block_size": BLOCK_SIZE,
        **overrides,
    }
    return LLM(str(folder), **args)  # type: ignore[arg-type]


def grow(engine: LLMEngine, tokens: int, prompt: list[int] = PROMPT) -> tuple[list[int], list[int]]:
    """Generate `tokens` greedy tokens for one request, stepping by hand; returns (tokens, blocks in use after
    each step), checking the block manager's invariants at every step."""
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    engine.add_request("grow", prompt, params)
    in_use: list[int] = []
    output = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            output = out
        engine.block_manager.check_invariants(engine.scheduler.running)
        in_use.append(engine.block_manager.num_used_blocks)
    assert output is not None and output.finished
    return list(output.outputs[0].token_ids), in_use


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_blocks_in_use_stay_bounded_while_a_sequence_grows_to_ten_windows(
    mistral_dir: Path, prefix_caching: bool
) -> None:
    """A sequence of 10x the window holds at most the window's blocks (plus the one being written and one the
    window straddles), prompt blocks on top when the prefix cache keeps them; the greedy tokens equal those
    of the same engine keeping every block."""
    llm = engine_for(mistral_dir, enable_prefix_caching=prefix_caching)
    engine = llm.engine
    assert engine.block_manager.window == WINDOW
    length = 10 * WINDOW
    tokens, in_use = grow(engine, length - len(PROMPT))
    window_blocks = WINDOW // BLOCK_SIZE + 2
    prompt_blocks = len(PROMPT) // BLOCK_SIZE if prefix_caching else 0
    assert max(in_use) <= window_blocks + prompt_blocks
    assert max(in_use[len(in_use) // 2 :]) == max(in_use[: len(in_use) // 2 + 1])  # flat, not growing
    assert engine.block_manager.num_window_released >= (length - WINDOW) // BLOCK_SIZE - prompt_blocks - 2

    keeping = engine_for(mistral_dir, enable_prefix_caching=prefix_caching).engine
    keeping.block_manager.release_outside_window = lambda seq: 0  # type: ignore[method-assign]  # keep all
    kept_tokens, kept_in_use = grow(keeping, length - len(PROMPT))
    assert kept_tokens == tokens
    assert max(kept_in_use) >= length // BLOCK_SIZE  # without release, memory grows with the sequence


def test_prefix_cache_hits_still_work_with_a_window(mistral_dir: Path) -> None:
    """The prompt's blocks stay cached (they are not released by the window), so an identical prompt reuses
    them, and its greedy tokens do not change."""
    llm = engine_for(mistral_dir)
    prompt = PROMPT * 4  # 44 tokens: longer than the window, 11 full blocks
    first, _ = grow(llm.engine, 40, prompt)
    cache = llm.engine.block_manager.prefix_cache
    assert cache is not None
    hits_before = cache.num_hit_tokens
    second, _ = grow(llm.engine, 40, prompt)
    assert cache.num_hit_tokens - hits_before == 40  # 10 of the 11 blocks (the last token is recomputed)
    assert second == first


def test_speculation_with_a_window_gives_the_same_tokens(mistral_dir: Path) -> None:
    plain, _ = grow(engine_for(mistral_dir).engine, 100)
    speculating = engine_for(mistral_dir, speculative_method="ngram").engine
    tokens, in_use = grow(speculating, 100)
    assert tokens == plain
    assert max(in_use) <= WINDOW // BLOCK_SIZE + 2 + len(PROMPT) // BLOCK_SIZE + 2  # + the drafts' blocks


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama trained for 64 positions and no window of its own."""
    folder = tmp_path_factory.mktemp("tiny-llama-64")
    build_hf_model("llama", folder, seed=6, max_position_embeddings=64, initializer_range=0.1)
    build_tokenizer(folder, vocab_size=320)
    return folder


@pytest.mark.parametrize("sinks", [0, 4])
def test_a_stream_decodes_past_max_position_embeddings_with_bounded_kv(llama_dir: Path, sinks: int) -> None:
    """--sliding-window 16 (--attention-sinks 4): 400 tokens from a model trained for 64 positions, its KV
    bounded by the window's blocks plus the sinks' (prefix caching on, as by default)."""
    llm = engine_for(llama_dir, max_model_len=1024, sliding_window=WINDOW, attention_sinks=sinks)
    engine = llm.engine
    assert engine.max_model_len > engine.model_config.max_position_embeddings
    generated, in_use = grow(engine, 400)
    assert len(generated) == 400
    bound = WINDOW // BLOCK_SIZE + 2 + -(-sinks // BLOCK_SIZE) + len(PROMPT) // BLOCK_SIZE
    assert max(in_use) <= bound
    assert engine.block_manager.num_window_released >= (411 - WINDOW) // BLOCK_SIZE - bound


def test_structured_outputs_and_prefix_caching_hold_with_sinks(llama_dir: Path) -> None:
    from switchyard.engine.structured.params import StructuredOutputsParams

    llm = engine_for(llama_dir, max_model_len=1024, sliding_window=WINDOW, attention_sinks=4)
    params = SamplingParams(
        temperature=0, max_tokens=60, structured_outputs=StructuredOutputsParams(regex="(ab|cd){5,30}")
    )
    prompt = PROMPT * 4
    first = llm.generate([prompt], params)[0].outputs[0].text
    assert first and all(first[i : i + 2] in ("ab", "cd") for i in range(0, len(first), 2))
    second = llm.generate([prompt], params)[0]
    assert second.num_cached_tokens > 0 and second.outputs[0].text == first


def test_combinations_that_cannot_work_are_refused_by_name(llama_dir: Path, mistral_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"speculative decoding \(ngram\).*attention sinks"):
        engine_for(llama_dir, sliding_window=WINDOW, attention_sinks=4, speculative_method="ngram")
    with pytest.raises(ValueError, match="has its own sliding window"):
        engine_for(mistral_dir, sliding_window=WINDOW)
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
        engine_for(llama_dir, max_model_len=1024)  # without a window the trained context is the limit
    with pytest.raises(ValueError, match="not supported with --tensor-parallel-size"):
        engine_for(llama_dir, sliding_window=WINDOW, tensor_parallel_size=2)


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_a_stream_longer_than_the_whole_kv_cache_is_admitted(llama_dir: Path, prefix_caching: bool) -> None:
    """A KV cache of 40 blocks (160 tokens) serves a 600-token stream under a window of 16 and 4 sinks: what a
    request holds, not how long it runs, is what must fit. Without the window it is refused as never fitting."""
    kv_bytes_per_block = BLOCK_SIZE * 2 * 2 * 2 * 16 * 4  # tokens x K/V x layers x KV heads x head_dim x fp32
    small = {"kv_cache_memory": 40 * kv_bytes_per_block, "enable_prefix_caching": prefix_caching}
    llm = engine_for(llama_dir, max_model_len=1024, sliding_window=WINDOW, attention_sinks=4, **small)
    assert llm.engine.block_manager.num_blocks == 40
    generated, in_use = grow(llm.engine, 600 - len(PROMPT))
    assert len(generated) == 600 - len(PROMPT) and max(in_use) <= 12
    plain = engine_for(llama_dir, max_model_len=64, kv_cache_memory=10 * kv_bytes_per_block)
    with pytest.raises(InvalidRequestError, match="can never fit in the KV cache"):
        plain.generate([PROMPT], SamplingParams(max_tokens=50))  # 61 tokens, 40 in the cache
