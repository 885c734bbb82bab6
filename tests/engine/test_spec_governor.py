"""The speculation governor: speculate only at batch sizes where it was measured faster, probing the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.spec.governor import SpeculationGovernor
from switchyard.llm import LLM
from tests.engine.test_spec_decode import mixed_prompts


def test_tries_both_modes_then_keeps_the_faster() -> None:
    governor = SpeculationGovernor(probe_every=10, probe_steps=2)
    assert governor.should_speculate(1)  # nothing measured: try speculation first
    governor.record(1, True, tokens=3, seconds=0.010)  # 300 tok/s
    assert not governor.should_speculate(1)  # then plain
    governor.record(1, False, tokens=1, seconds=0.005)  # 200 tok/s
    choices = []
    for _ in range(20):
        speculate = governor.should_speculate(1)
        choices.append(speculate)
        governor.record(1, speculate, tokens=3 if speculate else 1, seconds=0.010 if speculate else 0.005)
    # Bucket steps 2..21: speculation, except the probes of plain at steps 8-9 and 18-19 of every 10.
    assert [i for i, speculate in enumerate(choices) if not speculate] == [6, 7, 16, 17]


def test_switches_when_speculation_turns_slower() -> None:
    governor = SpeculationGovernor(probe_every=8, probe_steps=2, smoothing=0.5)
    governor.record(2, True, tokens=8, seconds=0.010)  # 800 tok/s
    governor.record(2, False, tokens=2, seconds=0.005)  # 400 tok/s
    speculated = []
    for _ in range(40):
        speculate = governor.should_speculate(2)
        speculated.append(speculate)
        # The text changes: proposals stop being accepted, and a speculative step now emits 2 tokens.
        governor.record(2, speculate, tokens=2, seconds=0.010 if speculate else 0.005)
    assert speculated[0]
    assert sum(speculated[-8:]) == 2  # by now plain, with speculation only in its probes
    assert governor.pace(2, True) == pytest.approx(200, rel=0.2)
    assert governor.pace(2, False) == pytest.approx(400)


def test_batch_sizes_are_measured_apart() -> None:
    governor = SpeculationGovernor()
    governor.record(1, True, tokens=4, seconds=0.01)
    governor.record(1, False, tokens=1, seconds=0.01)
    assert governor.pace(4, True) is None and governor.should_speculate(4)
    governor.record(4, True, tokens=4, seconds=0.04)
    governor.record(4, False, tokens=4, seconds=0.01)
    assert governor.should_speculate(1) and not governor.should_speculate(4)
    assert governor.pace(1, True) == pytest.approx(400) and governor.pace(4, True) == pytest.approx(100)


def test_steps_without_work_are_not_counted() -> None:
    governor = SpeculationGovernor()
    governor.record(1, True, tokens=0, seconds=0.01)
    governor.record(1, True, tokens=3, seconds=0.0)
    assert governor.pace(1, True) is None


@pytest.mark.parametrize(
    ("probe_every", "probe_steps", "smoothing"), [(4, 4, 0.5), (4, -1, 0.5), (8, 2, 0.0)]
)
def test_bad_settings_are_refused(probe_every: int, probe_steps: int, smoothing: float) -> None:
    with pytest.raises(ValueError):
        SpeculationGovernor(probe_every=probe_every, probe_steps=probe_steps, smoothing=smoothing)


def _governed_llm(model_dir: Path, speculation_faster: bool | None) -> LLM:
    """An adaptive draft-model engine; with `speculation_faster` set, its governor starts from those measurements
    at every batch size and never probes, so what it decides does not depend on this machine's timing."""
    llm = LLM(
        model=str(model_dir),
        dtype="float32",
        max_model_len=512,
        kv_cache_memory=32 << 20,
        speculative_method="draft",
        speculative_model=str(model_dir),  # the model drafts for itself: every proposal is accepted
        spec_max_batch_size=64,
        spec_adaptive=True,
    )
    if speculation_faster is not None:
        governor = SpeculationGovernor(probe_every=10_000, probe_steps=0, smoothing=1e-9)
        for batch_size in range(1, 65):
            governor.record(batch_size, True, tokens=3 if speculation_faster else 1, seconds=0.01)
            governor.record(batch_size, False, tokens=2, seconds=0.01)
        assert llm.engine.speculation is not None
        llm.engine.speculation.governor = governor
    return llm


def test_engine_speculates_only_where_the_governor_says(tiny_model_dir: Path) -> None:
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    prompts = mixed_prompts()
    plain = LLM(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=32 << 20)
    expected = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    for faster in (True, False):
        llm = _governed_llm(tiny_model_dir, speculation_faster=faster)
        assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == expected
        assert llm.engine.spec_decoder is not None
        assert (llm.engine.spec_decoder.stats.proposed > 0) is faster


def test_engine_times_both_modes(tiny_model_dir: Path) -> None:
    """Left to itself, the engine tries speculation in the first decode step and plain decoding in the next,
    and reports both to the governor."""
    llm = _governed_llm(tiny_model_dir, speculation_faster=None)
    governor = llm.engine.speculation.governor if llm.engine.speculation is not None else None
    assert governor is not None
    llm.generate([[7, 8, 9, 10, 11] * 8], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    assert governor.pace(1, True) is not None
    assert governor.pace(1, False) is not None


def test_adaptive_ngram_is_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="draft and speculator methods, not ngram"):
        LLM(model=str(tiny_model_dir), dtype="float32", speculative_method="ngram", spec_adaptive=True)
