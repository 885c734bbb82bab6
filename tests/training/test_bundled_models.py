"""The shipped bundled models (skipped until `switchyard train-default` has built them)."""

from __future__ import annotations

import pytest
import torch
import transformers
from paged_runner import PagedRunner

from switchyard import LLM, SamplingParams
from switchyard.agents.demo_world import TOOLS
from switchyard.models.loader import load_model
from switchyard.models.registry import BUNDLED_MODELS, DRAFT_MODEL, MAIN_MODEL, SPECULATOR_MODEL, is_built
from switchyard.models.speculator import load_speculator
from switchyard.models.tokenizer import render_chat

pytestmark = pytest.mark.skipif(
    not all(is_built(path) for path in BUNDLED_MODELS.values()), reason="bundled models not built yet"
)


@pytest.mark.parametrize("name", [MAIN_MODEL, DRAFT_MODEL])
def test_bundled_model_matches_transformers(name: str) -> None:
    folder = BUNDLED_MODELS[name]
    ids = torch.tensor([[5, 17, 99, 240, 31, 7, 300, 12]])
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ours = load_model(folder, dtype="float32")
    with torch.no_grad():
        expected = hf(ids).logits[0, -1]
    runner = PagedRunner(ours, block_size=16, num_blocks=8, seed=0)
    seq = runner.add(ids[0].tolist())
    got = runner.prefill([seq])[seq]
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)


def test_bundled_parameter_budgets() -> None:
    sizes = {}
    for name in (MAIN_MODEL, DRAFT_MODEL):
        model = transformers.AutoModelForCausalLM.from_pretrained(BUNDLED_MODELS[name])
        sizes[name] = sum(p.numel() for p in model.parameters())
    assert sizes[MAIN_MODEL] <= 30_000_000 and sizes[DRAFT_MODEL] <= 4_000_000
    speculator = load_speculator(BUNDLED_MODELS[SPECULATOR_MODEL], torch.float32)
    main_config = transformers.AutoConfig.from_pretrained(BUNDLED_MODELS[MAIN_MODEL])
    assert speculator.config.hidden_size == main_config.hidden_size
    assert speculator.config.vocab_size == main_config.vocab_size
    assert sum(p.numel() for p in speculator.parameters()) <= 8_000_000
    total = sum(f.stat().st_size for path in BUNDLED_MODELS.values() for f in path.iterdir())
    assert total <= 80 * 1024 * 1024


def test_bundled_chat_model_answers_through_the_engine() -> None:
    llm = LLM(MAIN_MODEL, max_model_len=2048, kv_cache_memory=64 << 20)
    tools = list(TOOLS.values())
    prompt = render_chat(llm.tokenizer, [{"role": "user", "content": "Hello!"}], tools=tools)
    assert "get_weather" in llm.tokenizer.decode(prompt)  # the template renders the tool schemas
    output = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=32))[0]
    assert output.outputs[0].text.strip()


def test_bundled_speculator_is_the_default_and_keeps_outputs() -> None:
    """`--speculative-method speculator` with the bundled model loads the bundled speculator; greedy replies
    are the plain ones, and it guesses most of their tokens."""
    prompts = [
        [{"role": "user", "content": "What's the weather in Lisbon?"}],
        [
            {
                "role": "user",
                "content": 'Extract the JSON {"name": ..., "city": ...}: Ana Souza lives in Porto.',
            }
        ],
    ]
    params = SamplingParams(temperature=0, max_tokens=48)
    plain = LLM(MAIN_MODEL, max_model_len=2048, kv_cache_memory=64 << 20)
    spec = LLM(MAIN_MODEL, max_model_len=2048, kv_cache_memory=64 << 20, speculative_method="speculator")
    tools = list(TOOLS.values())
    rendered = [render_chat(plain.tokenizer, messages, tools=tools) for messages in prompts]
    expected = [o.outputs[0].token_ids for o in plain.generate(rendered, params, use_tqdm=False)]
    assert [o.outputs[0].token_ids for o in spec.generate(rendered, params, use_tqdm=False)] == expected
    decoder = spec.engine.spec_decoder
    assert decoder is not None and decoder.speculator is not None
    assert decoder.stats.acceptance_rate > 0.3
