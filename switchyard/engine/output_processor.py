"""What happens to a sequence after the model has given it tokens: appending them, stop checks, finishing, and
the RequestOutputs (deltas since the last one) that the engine reports; prompt logprobs too.

Finishing takes a sequence out of the scheduler, which the engine passes in: after a hung step it is a fresh
one (`recovery`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from switchyard.engine.model_runner import ForwardResult
from switchyard.engine.sampler import TopLogprobs
from switchyard.engine.scheduler import Scheduler
from switchyard.engine.sequence import (
    CompletionOutput,
    FinishReason,
    Request,
    RequestMetrics,
    RequestOutput,
    Sequence,
    SequenceStatus,
    TokenLogprob,
    now,
)
from switchyard.engine.spec.decoder import SpecDecoder
from switchyard.engine.structured.admission import GrammarAdmission
from switchyard.engine.structured.output_check import ConstrainedOutputError


class GrammarViolationError(RuntimeError):
    """A sampled token the request's grammar refuses: the grammar mask must have prevented it (a bug)."""


@dataclass(frozen=True)
class Finish:
    """Why a sequence must finish now."""

    reason: FinishReason
    stop_reason: str | int | None = None
    """The stop string or stop token id that ended it (None for EOS, length, a complete grammar)."""


class OutputProcessor:
    def __init__(
        self, max_model_len: int, spec_decoder: SpecDecoder | None, grammars: GrammarAdmission
    ) -> None:
        self.max_model_len = max_model_len
        self.spec_decoder = spec_decoder
        """Released of a sequence's proposer state when the sequence finishes."""
        self.grammars = grammars
        """Counts a sampled token a grammar refuses (`StructuredOutputStats.rejected_tokens`)."""
        self.num_generated_tokens = 0
        """Output tokens appended since start (for metrics)."""

    def append_token(
        self,
        seq: Sequence,
        token: int,
        scheduler: Scheduler,
        logprob: float = float("nan"),
        top: TopLogprobs | None = None,
        row: int = 0,
    ) -> None:
        """Append a sampled token, with its logprobs when asked (`row` of `top`), and finish the sequence if
        it stops here. A finished sequence takes no more tokens."""
        if seq.is_finished:
            return
        finish = self._append(seq, token, logprob, top, row)
        if finish is not None:
            self.finish(seq, finish, scheduler)
            if finish.reason is FinishReason.STOP and seq.grammar is not None:
                self._check_constrained_output(seq)

    def _check_constrained_output(self, seq: Sequence) -> None:
        """Raise ConstrainedOutputError (the sequence finished as an error) if the grammar let through a text
        its spec rejects; the engine then fails the request. Counted by backend and construct."""
        check = seq.request.output_check
        manager = self.grammars.built
        if check is None or seq.detokenizer is None or manager is None:
            return
        manager.stats.checked_outputs += 1
        mismatch = check.check(seq.detokenizer.text)
        if mismatch is None:
            return
        compiled = seq.request.compiled_grammar
        backend = manager.backend_name(compiled) if compiled is not None else manager.backend.name
        manager.record_invalid_output(backend, mismatch.construct)
        seq.finish_reason = FinishReason.ERROR
        raise ConstrainedOutputError(
            f"the {backend} grammar backend produced a {check.kind} output that breaks its spec: "
            f"{mismatch.message}",
            construct=mismatch.construct,
        )

    def append_tokens(self, seq: Sequence, tokens: list[int], scheduler: Scheduler) -> None:
        """Append verified speculative tokens (no logprobs: speculation is off for requests that want them)
        up to the first that finishes the sequence."""
        for token in tokens:
            self.append_token(seq, token, scheduler)
            if seq.is_finished:
                return

    def _append(
        self, seq: Sequence, token: int, logprob: float, top: TopLogprobs | None, row: int
    ) -> Finish | None:
        """Append the token; returns why the sequence must finish, if it must."""
        params = seq.request.params
        if seq.grammar is not None and not seq.grammar.accept_token(token):
            if self.grammars.built is not None:
                self.grammars.built.stats.rejected_tokens += 1
            raise GrammarViolationError(f"sampled token {token} violates the request's grammar")
        seq.token_ids.append(token)
        self.num_generated_tokens += 1
        if params.logprobs is not None:
            seq.cumulative_logprob += logprob
            alternatives = []
            if top is not None and params.logprobs:
                values, ids = top
                alternatives = list(
                    zip(ids[row][: params.logprobs], values[row][: params.logprobs], strict=True)
                )
            seq.logprobs.append(TokenLogprob(token, logprob, alternatives))
        past_min = seq.num_output_tokens >= params.min_tokens
        # A finishing EOS or stop token is kept in token_ids but never shown as text.
        if past_min and not params.ignore_eos and token in seq.request.eos_token_ids:
            return Finish(FinishReason.STOP)
        if past_min and token in params.stop_token_ids:
            return Finish(FinishReason.STOP, token)
        if seq.grammar is not None and seq.grammar.is_terminated():
            return Finish(FinishReason.STOP)  # the grammar is complete: only its stop token was allowed
        if seq.detokenizer is not None:
            stop_string = seq.detokenizer.add_tokens([token]).stop_string
            if stop_string is not None:
                return Finish(FinishReason.STOP, stop_string)
        if seq.num_output_tokens >= seq.request.max_tokens or seq.num_tokens >= self.max_model_len:
            return Finish(FinishReason.LENGTH)
        return None

    def finish(self, seq: Sequence, finish: Finish, scheduler: Scheduler) -> None:
        """Finish the sequence: out of the scheduler (its blocks freed) and the speculative decoder."""
        if seq.status in (SequenceStatus.WAITING, SequenceStatus.RUNNING):
            scheduler.remove(seq)
        if self.spec_decoder is not None:
            self.spec_decoder.release(seq.seq_id)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = finish.reason
        seq.stop_reason = finish.stop_reason
        stopped_on_string = isinstance(finish.stop_reason, str)
        if seq.detokenizer is not None and not stopped_on_string:
            seq.detokenizer.flush()  # release text held back as a possible stop-string prefix
        if seq.request.timing.finished is None and all(s.is_finished for s in seq.request.sequences):
            seq.request.timing.finished = now()

    @staticmethod
    def request_output(request: Request) -> RequestOutput:
        """The request's state, with deltas since its previous output (which this one moves past)."""
        completions = []
        for seq in request.sequences:
            text = seq.detokenizer.text if seq.detokenizer is not None else ""
            output_ids = seq.output_token_ids
            want_logprobs = request.params.logprobs is not None
            completions.append(
                CompletionOutput(
                    index=seq.sample_index,
                    text=text,
                    token_ids=output_ids,
                    delta_text=text[seq.num_emitted_chars :],
                    delta_token_ids=output_ids[seq.num_emitted_tokens :],
                    logprobs=list(seq.logprobs) if want_logprobs else None,
                    delta_logprobs=seq.logprobs[seq.num_emitted_tokens :] if want_logprobs else None,
                    cumulative_logprob=seq.cumulative_logprob if want_logprobs else None,
                    finish_reason=seq.finish_reason.value if seq.finish_reason else None,
                    stop_reason=seq.stop_reason,
                )
            )
            seq.num_emitted_chars = len(text)
            seq.num_emitted_tokens = len(output_ids)
        timing = request.timing
        return RequestOutput(
            request_id=request.request_id,
            prompt=request.prompt,
            prompt_token_ids=request.prompt_token_ids,
            outputs=completions,
            finished=request.is_finished,
            num_cached_tokens=request.num_cached_tokens,
            prompt_logprobs=request.prompt_logprobs,
            tenant=request.tenant,
            priority=request.priority,
            error_code=request.error_code,
            metrics=RequestMetrics(
                timing.arrival, timing.first_scheduled, timing.first_token, timing.finished
            ),
            error=request.error,
        )

    @staticmethod
    def wants_prompt_logprobs(scheduled: Iterable[tuple[Sequence, int]]) -> set[int]:
        """Sequences of the step whose prompt chunk needs logits at every position (prompt logprobs)."""
        return {
            seq.seq_id
            for seq, _ in scheduled
            if seq.request.prompt_logprobs is not None and seq.num_computed_tokens < seq.num_prompt_tokens - 1
        }

    @staticmethod
    def record_prompt_logprobs(result: ForwardResult, running: Iterable[Sequence]) -> None:
        """Fill the requests' prompt logprobs from this step's prompt logits."""
        if not result.prompt_logits:
            return
        by_id = {seq.seq_id: seq for seq in running}
        for seq_id, (first, logits) in result.prompt_logits.items():
            request = by_id[seq_id].request
            assert request.prompt_logprobs is not None
            k = request.params.prompt_logprobs or 0
            logprobs = torch.log_softmax(logits, dim=-1)
            targets = torch.tensor(request.prompt_token_ids[first + 1 : first + 1 + logits.shape[0]])
            chosen_values = logprobs.gather(1, targets[:, None])
            ranks = ((logprobs > chosen_values).sum(dim=1) + 1).tolist()
            chosen = chosen_values.squeeze(1).tolist()
            top_values = top_ids = None
            if k:
                top_values, top_ids = (t.tolist() for t in logprobs.topk(k, dim=-1))
            for j, value in enumerate(chosen):
                position = first + 1 + j
                if request.prompt_logprobs[position] is None:
                    alternatives = (
                        list(zip(top_ids[j], top_values[j], strict=True)) if top_ids and top_values else []
                    )
                    request.prompt_logprobs[position] = TokenLogprob(
                        targets[j].item(), value, alternatives, rank=ranks[j]
                    )
