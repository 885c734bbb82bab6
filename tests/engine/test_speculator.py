"""Speculator proposer (look-ahead heads on the target's hidden state): greedy outputs unchanged under
batching, chunked prefill and preemption; blocks exact; bad folders refused. Its sampling is checked for
losslessness with the other proposers in test_spec_decode.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from switchyard.engine.sampling_params import SamplingParams
from switchyard.errors import ModelLoadError
from switchyard.llm import LLM
from switchyard.models.speculator import (
    Speculator,
    SpeculatorConfig,
    SpeculatorFormatError,
    is_speculator_folder,
    load_speculator,
)


def speculating_llm(model: Path, speculator: Path, **overrides: object) -> LLM:
    return LLM(
        model=str(model),
        dtype="float32",
        max_model_len=512,
        speculative_method="speculator",
        speculative_model=str(speculator),
        num_speculative_tokens=4,
        spec_max_batch_size=64,
        **overrides,  # type: ignore[arg-type]
    )


def test_speculator_folder_round_trip(tmp_path: Path) -> None:
    speculator = Speculator(SpeculatorConfig(hidden_size=16, vocab_size=32, num_steps=2))
    speculator.save(tmp_path)
    assert is_speculator_folder(tmp_path)
    loaded = load_speculator(tmp_path, torch.float32)
    hidden, tokens = torch.randn(3, 16), torch.tensor([1, 2, 3])
    assert torch.equal(loaded.greedy(hidden, tokens, 2), speculator.greedy(hidden, tokens, 2))


def test_bad_speculator_folders_are_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(SpeculatorFormatError, match=r"config\.json"):
        load_speculator(tmp_path, torch.float32)
    assert not is_speculator_folder(tiny_model_dir)
    with pytest.raises(SpeculatorFormatError, match="not a speculator"):
        load_speculator(tiny_model_dir, torch.float32)
    Speculator(SpeculatorConfig(hidden_size=16, vocab_size=32, num_steps=2)).save(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_steps": 3}))
    with pytest.raises(SpeculatorFormatError, match="does not match"):
        load_speculator(tmp_path, torch.float32)


def test_a_speculator_for_another_model_is_refused_at_load(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Its hidden size must be the target's: a typed load error naming both, not a shape error mid-step."""
    Speculator(SpeculatorConfig(hidden_size=48, vocab_size=320)).save(tmp_path)
    with pytest.raises(ModelLoadError, match="hidden states of size 48"):
        speculating_llm(tiny_model_dir, tmp_path)


def test_the_speculator_method_needs_a_model_outside_the_bundle(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="needs a model"):
        LLM(model=str(tiny_model_dir), dtype="float32", speculative_method="speculator")


def test_prompt_lookup_proposes_where_the_speculator_is_unsure() -> None:
    """Below `lookup_below` on its first guess the speculator yields to prompt lookup's continuation (a point
    mass, no q); above it, or with no match in the context, it drafts its own guesses; a stale state (the
    sequence moved since it was recorded) gets no proposal."""
    from switchyard.engine.sampler import Sampler
    from switchyard.engine.sequence import Request, RequestTiming, Sequence
    from switchyard.engine.spec.ngram import NgramProposer
    from switchyard.engine.spec.speculator import SpeculatorProposer

    torch.manual_seed(0)
    model = Speculator(SpeculatorConfig(hidden_size=16, vocab_size=32, num_steps=3)).eval()
    tokens = [5, 6, 7, 8, 9, 5, 6]  # lookup continues "5 6" with "7 8 9"
    request = Request("r", tokens[:3], SamplingParams(temperature=0), 16, (), RequestTiming(arrival=0.0))
    seq = Sequence(seq_id=0, request=request, sample_index=0, token_ids=list(tokens))
    hidden = torch.randn(16)
    own = model.greedy(hidden[None], torch.tensor([6]), 3)[0].tolist()

    def proposal(lookup_below: float) -> list[int]:
        proposer = SpeculatorProposer(model, 32, Sampler(), NgramProposer(2, 4), lookup_below)
        proposer.observe(seq, hidden)
        found = proposer.propose([(seq, 3)])
        return found[0].tokens

    assert proposal(1.0) == [7, 8, 9]  # a random speculator is never sure of anything
    assert proposal(0.0) == own
    seq.token_ids.append(3)  # no earlier "6 3" or "3": nothing to look up, so the speculator drafts
    proposer = SpeculatorProposer(model, 32, Sampler(), NgramProposer(2, 4), 1.0)
    proposer.observe(seq, hidden)
    assert (
        proposer.propose([(seq, 3)])[0].tokens == model.greedy(hidden[None], torch.tensor([3]), 3)[0].tolist()
    )
    seq.token_ids.append(4)
    assert proposer.propose([(seq, 3)]) == {}  # the state belongs to the previous token
