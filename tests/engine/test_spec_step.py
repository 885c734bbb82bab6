"""The speculative step's bookkeeping around the scheduler, without a model: drafts the scheduler did not
schedule in full are taken back before the forward pass."""

from __future__ import annotations

from typing import cast

import torch

from switchyard.engine.input_processor import InputLimits, InputProcessor
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.scheduler import SchedulerOutput
from switchyard.engine.sequence import Sequence
from switchyard.engine.spec.decoder import SpecDecoder
from switchyard.engine.spec.draft import DraftProposal
from switchyard.engine.spec.step import DraftRound, SpeculativeStep
from switchyard.engine.structured.admission import GrammarAdmission

LIMITS = InputLimits(vocab_size=100, max_model_len=64, kv_cache_tokens=256, max_num_seqs=8)


def drafted_sequence(inputs: InputProcessor, request_id: str, drafts: list[int]) -> Sequence:
    seq = inputs.process(request_id, [5, 6, 7, 8], SamplingParams(max_tokens=8)).sequences[0]
    seq.num_computed_tokens = seq.num_tokens - 1
    seq.token_ids += drafts
    seq.num_draft_tokens = len(drafts)
    return seq


def test_drafts_not_scheduled_in_full_are_taken_back() -> None:
    grammars = GrammarAdmission("xgrammar", None, LIMITS.vocab_size, (2,))
    inputs = InputProcessor(None, (2,), LIMITS, torch.device("cpu"), grammars)
    step = SpeculativeStep(cast(SpecDecoder, None), None, max_num_batched_tokens=64, max_model_len=64)
    full, cut, unscheduled = (drafted_sequence(inputs, name, [9, 10, 11]) for name in ("a", "b", "c"))
    for seq in (full, cut, unscheduled):
        step._proposals[seq.seq_id] = DraftProposal([9, 10, 11])
    plan = SchedulerOutput(scheduled=[(full, 4), (cut, 2)])
    draft_round = DraftRound(started=0.0, governed=None, speculate=True, drafted=[full, cut, unscheduled])
    assert step.keep_scheduled(plan, draft_round) == frozenset({full.seq_id}) == draft_round.verifying
    assert full.token_ids[-3:] == [9, 10, 11] and full.num_draft_tokens == 3
    for seq in (cut, unscheduled):
        assert seq.token_ids == [5, 6, 7, 8] and seq.num_draft_tokens == 0
    assert plan.scheduled == [(full, 4), (cut, 1)], "a cut sequence decodes one token instead"
    assert set(step._proposals) == {full.seq_id}
    assert draft_round.emitted_before is None, "no governor, no measurement"


def test_take_drafts_returns_and_removes_them() -> None:
    grammars = GrammarAdmission("xgrammar", None, LIMITS.vocab_size, (2,))
    inputs = InputProcessor(None, (2,), LIMITS, torch.device("cpu"), grammars)
    seq = drafted_sequence(inputs, "a", [9, 10])
    assert seq.take_drafts() == [9, 10] and seq.token_ids == [5, 6, 7, 8]
    assert seq.take_drafts() == [] and seq.token_ids == [5, 6, 7, 8]
