"""The output processor on its own: appending tokens, stop checks, finishing, and output deltas."""

from __future__ import annotations

import torch

from switchyard.engine.block_manager import BlockManager
from switchyard.engine.input_processor import InputLimits, InputProcessor
from switchyard.engine.output_processor import OutputProcessor
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.scheduler import Scheduler, SchedulerConfig
from switchyard.engine.sequence import FinishReason, Request, Sequence, SequenceStatus
from switchyard.engine.structured.admission import GrammarAdmission

EOS = (2,)
LIMITS = InputLimits(vocab_size=100, max_model_len=16, kv_cache_tokens=64, max_num_seqs=4)


def setup(params: SamplingParams) -> tuple[OutputProcessor, Scheduler, Request, Sequence]:
    grammars = GrammarAdmission("xgrammar", None, LIMITS.vocab_size, EOS)
    inputs = InputProcessor(None, EOS, LIMITS, torch.device("cpu"), grammars)
    request = inputs.process("r", [5, 6, 7], params)
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4), BlockManager(4, 16))
    scheduler.add(request.sequences[0])
    return OutputProcessor(LIMITS.max_model_len, None, grammars), scheduler, request, request.sequences[0]


def test_tokens_are_appended_until_max_tokens() -> None:
    outputs, scheduler, request, seq = setup(SamplingParams(max_tokens=3))
    for token in (10, 11, 12, 13):
        outputs.append_token(seq, token, scheduler)
    assert seq.output_token_ids == [10, 11, 12], "a finished sequence takes no more tokens"
    assert seq.finish_reason is FinishReason.LENGTH and seq.status is SequenceStatus.FINISHED
    assert not scheduler.has_work() and outputs.num_generated_tokens == 3
    assert request.timing.finished is not None


def test_eos_finishes_after_min_tokens_unless_ignored() -> None:
    outputs, scheduler, _, seq = setup(SamplingParams(max_tokens=8, min_tokens=2))
    outputs.append_token(seq, EOS[0], scheduler)
    assert not seq.is_finished, "EOS before min_tokens does not stop"
    outputs.append_token(seq, EOS[0], scheduler)
    assert (seq.finish_reason, seq.stop_reason) == (FinishReason.STOP, None)
    outputs, scheduler, _, seq = setup(SamplingParams(max_tokens=8, ignore_eos=True))
    outputs.append_token(seq, EOS[0], scheduler)
    assert not seq.is_finished


def test_a_stop_token_is_the_stop_reason() -> None:
    outputs, scheduler, _, seq = setup(SamplingParams(max_tokens=8, stop_token_ids=[42]))
    outputs.append_tokens(seq, [10, 42, 11], scheduler)
    assert seq.output_token_ids == [10, 42] and (seq.finish_reason, seq.stop_reason) == (
        FinishReason.STOP,
        42,
    )


def test_the_context_length_finishes_a_sequence() -> None:
    outputs, scheduler, request, seq = setup(SamplingParams(max_tokens=12))
    request.max_tokens = 100  # as if max_tokens had been resolved against a longer context
    outputs.append_tokens(seq, list(range(10, 30)), scheduler)
    assert seq.num_tokens == LIMITS.max_model_len and seq.finish_reason is FinishReason.LENGTH


def test_logprobs_are_kept_when_asked() -> None:
    outputs, scheduler, _, seq = setup(SamplingParams(max_tokens=4, logprobs=1))
    top = ([[-0.1, -2.0], [-0.5, -1.0]], [[10, 11], [12, 13]])
    outputs.append_token(seq, 10, scheduler, -0.1, top, 0)
    outputs.append_token(seq, 13, scheduler, -1.0, top, 1)
    assert [(lp.token_id, lp.logprob, lp.top) for lp in seq.logprobs] == [
        (10, -0.1, [(10, -0.1)]),
        (13, -1.0, [(12, -0.5)]),
    ]
    assert seq.cumulative_logprob == -1.1


def test_request_outputs_carry_deltas_since_the_last_one() -> None:
    outputs, scheduler, request, seq = setup(SamplingParams(max_tokens=4))
    outputs.append_tokens(seq, [10, 11], scheduler)
    first = outputs.request_output(request)
    outputs.append_token(seq, 12, scheduler)
    second = outputs.request_output(request)
    assert first.outputs[0].delta_token_ids == [10, 11] and not first.finished
    assert second.outputs[0].delta_token_ids == [12] and second.outputs[0].token_ids == [10, 11, 12]
    assert second.outputs[0].logprobs is None


def test_wants_prompt_logprobs_only_while_the_prompt_is_computed() -> None:
    _, _, _, seq = setup(SamplingParams(max_tokens=4, prompt_logprobs=0))
    assert OutputProcessor.wants_prompt_logprobs([(seq, 3)]) == {seq.seq_id}
    seq.num_computed_tokens = 2
    assert OutputProcessor.wants_prompt_logprobs([(seq, 1)]) == set()
