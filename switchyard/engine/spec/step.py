"""The speculative phases of one engine step, around the scheduler and the forward pass.

1. `propose` (before scheduling): the governor decides whether this step speculates; eligible decoding
   sequences get draft tokens appended, within the step's token and free-block budget (speculation must never
   cause a preemption).
2. `keep_scheduled` (after scheduling): drafts of sequences not scheduled in full are dropped again.
3. `verify` (after the forward pass): each verifying sequence's drafts come off its tokens, its verified
   positions get their grammar masks, and one batched `SpecDecoder.verify` gives the verdicts. The tokens to
   emit come back as values; the engine appends them, then `settle` rolls the sequence's KV back to them.
4. `record`: the governor learns what this step's mode yielded per second.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import torch

from switchyard.engine.block_manager import BlockManager
from switchyard.engine.model_runner import ForwardResult
from switchyard.engine.scheduler import SchedulerOutput
from switchyard.engine.sequence import Request, Sequence, now
from switchyard.engine.spec.decoder import PendingVerification, SpecDecoder
from switchyard.engine.spec.draft import DraftProposal
from switchyard.engine.spec.governor import SpeculationGovernor
from switchyard.engine.structured.backend import GrammarMatcher
from switchyard.engine.structured.manager import StructuredOutputManager

logger = logging.getLogger(__name__)


@dataclass
class DraftRound:
    """One step's speculation, from proposal to the governor's measurement."""

    started: float
    governed: int | None
    """The running count the governor keys this step by; None where it has no say."""
    speculate: bool
    drafted: list[Sequence]
    """Sequences given drafts before scheduling."""
    verifying: frozenset[int] = frozenset()
    """Of those, the seq_ids scheduled in full, whose drafts the forward pass verifies."""
    emitted_before: int | None = None
    """Output tokens before the forward pass, where the governor measures this step (pure decode steps)."""


@dataclass
class VerifiedDrafts:
    """A sequence's verdict: the tokens to append and how many of its drafts were accepted."""

    seq: Sequence
    emitted: list[int]
    accepted: int


@dataclass
class Verification:
    verified: list[VerifiedDrafts] = field(default_factory=list)
    failed: list[tuple[Request, Exception]] = field(default_factory=list)
    """Requests whose verification raised: the engine fails them."""
    touched: list[Request] = field(default_factory=list)
    """Every verifying request, in verification order (each gets a RequestOutput)."""


class SpeculativeStep:
    def __init__(
        self,
        decoder: SpecDecoder,
        governor: SpeculationGovernor | None,
        max_num_batched_tokens: int,
        max_model_len: int,
    ) -> None:
        self.decoder = decoder
        self.governor = governor
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self._proposals: dict[int, DraftProposal] = {}
        """This step's proposals being verified: their draft distributions (draft-model method, sampled
        requests) and the grammar masks filled while drafting."""

    def propose(
        self,
        running: list[Sequence],
        block_manager: BlockManager,
        structured: StructuredOutputManager | None,
    ) -> DraftRound:
        """Append proposed tokens to eligible decoding sequences, if the governor lets this step speculate."""
        started = now()
        governed = None
        if self.governor is not None and running and len(running) <= self.decoder.config.max_batch_size:
            governed = len(running)
        speculate = self.governor is None or governed is None or self.governor.should_speculate(governed)
        drafted = self._draft(running, block_manager, structured) if speculate else []
        return DraftRound(started, governed, speculate, drafted)

    def keep_scheduled(self, plan: SchedulerOutput, draft_round: DraftRound) -> frozenset[int]:
        """Drop the drafts of sequences not scheduled in full (preempted, paused, cut by the budget); returns
        the seq_ids whose drafts are verified."""
        scheduled = {seq.seq_id: index for index, (seq, _) in enumerate(plan.scheduled)}
        verifying = set()
        for seq in draft_round.drafted:
            index = scheduled.get(seq.seq_id)
            if index is not None and plan.scheduled[index][1] == seq.num_draft_tokens + 1:
                verifying.add(seq.seq_id)
                continue
            seq.take_drafts()
            self._proposals.pop(seq.seq_id, None)
            if index is not None:
                plan.scheduled[index] = (seq, 1)
        draft_round.verifying = frozenset(verifying)
        # The governor compares pure-decode steps only: a prefill chunk in the step would count as its cost.
        if draft_round.governed is not None and all(
            s.num_computed_tokens >= s.num_prompt_tokens for s, _ in plan.scheduled
        ):
            draft_round.emitted_before = sum(
                s.num_output_tokens - s.num_draft_tokens for s, _ in plan.scheduled
            )
        return draft_round.verifying

    def verify(
        self,
        result: ForwardResult,
        running: list[Sequence],
        structured: StructuredOutputManager | None,
    ) -> Verification:
        """Take each verifying sequence's drafts off its tokens and judge them against the target's logits.

        The grammar masks are per sequence; the verdicts come from one batched `SpecDecoder.verify`. If that
        batch fails, each sequence is verified alone, so only the one that cannot be verified fails."""
        out = Verification()
        pending: list[PendingVerification] = []
        stamp = now()
        by_id = {seq.seq_id: seq for seq in running}
        for seq_id, logits in result.verify_logits.items():
            seq = by_id[seq_id]
            drafts = seq.take_drafts()
            request = seq.request
            out.touched.append(request)
            if request.timing.first_token is None:
                request.timing.first_token = stamp
            proposal = self._proposals.pop(seq_id, None)
            try:
                if seq.grammar is not None and structured is not None:
                    masks = None if proposal is None else proposal.masks
                    mask_verified_positions(structured, seq.grammar, drafts, logits, masks)
                probs = None if proposal is None else proposal.probs
                pending.append(PendingVerification(seq, drafts, logits, probs))
            except Exception as exc:  # one request's verification failing must not stop the others
                out.failed.append((request, exc))
        try:
            verdicts = list(zip(pending, self.decoder.verify(pending), strict=True))
        except Exception:
            logger.exception("batched verification failed; verifying each sequence alone")
            verdicts = []
            for item in pending:
                try:
                    verdicts.append((item, self.decoder.verify([item])[0]))
                except Exception as exc:
                    out.failed.append((item.seq.request, exc))
        out.verified = [VerifiedDrafts(item.seq, emitted, accepted) for item, (emitted, accepted) in verdicts]
        return out

    def settle(
        self, seq: Sequence, accepted: int, block_manager: BlockManager, result: ForwardResult
    ) -> None:
        """After a verdict's tokens were appended to an unfinished sequence: free the blocks past its end,
        cache its full blocks, release those a sliding window left behind, and hand a speculator the hidden
        state behind its newest token."""
        block_manager.trim(seq, seq.num_tokens)
        block_manager.cache_full_blocks(seq)
        block_manager.release_outside_window(seq)
        if self.decoder.wants_hidden_states:  # row `accepted` gave the newest token
            self.decoder.observe(seq, result.verify_hidden[seq.seq_id][accepted])

    def observe_sampled(self, result: ForwardResult) -> None:
        """Hand a speculator the hidden state behind each sampled sequence's newest token."""
        if not self.decoder.wants_hidden_states:
            return
        assert result.sampled_hidden is not None
        for row, seq in enumerate(result.sampled_seqs):
            if not seq.is_finished and seq.sample_index == 0 and seq.request.params.n == 1:
                self.decoder.observe(seq, result.sampled_hidden[row])

    def record(self, draft_round: DraftRound, plan: SchedulerOutput) -> None:
        """Tell the governor what this step's mode produced and how long it took (measured steps only)."""
        if self.governor is None or draft_round.governed is None or draft_round.emitted_before is None:
            return
        emitted = sum(seq.num_output_tokens for seq, _ in plan.scheduled) - draft_round.emitted_before
        self.governor.record(
            draft_round.governed, draft_round.speculate, emitted, now() - draft_round.started
        )

    def _draft(
        self,
        running: list[Sequence],
        block_manager: BlockManager,
        structured: StructuredOutputManager | None,
    ) -> list[Sequence]:
        """Append proposed tokens to eligible decoding sequences, within the step's token and block budget."""
        spec = self.decoder
        if not running or len(running) > spec.config.max_batch_size:
            return []
        spare_tokens = self.max_num_batched_tokens - sum(
            seq.num_tokens - seq.num_computed_tokens for seq in running
        )
        spare_blocks = block_manager.num_free_blocks - sum(
            block_manager.blocks_needed(seq, 1) for seq in running
        )
        candidates = []
        for seq in running:
            if not spec.eligible(seq):
                continue
            room = min(
                seq.request.max_tokens - seq.num_output_tokens - 1,  # leave room for the bonus token
                self.max_model_len - seq.num_tokens - 1,
            )
            candidates.append((seq, room))
        proposals = (
            spec.propose(candidates, {seq.seq_id for seq in running}, structured) if candidates else {}
        )
        drafted = []
        for seq, _ in candidates:
            if seq.seq_id not in proposals or spare_tokens <= 0:
                continue
            proposal = proposals[seq.seq_id].truncated(spare_tokens)
            drafts = proposal.tokens
            extra_blocks = block_manager.blocks_needed(seq, 1 + len(drafts)) - block_manager.blocks_needed(
                seq, 1
            )
            if extra_blocks > spare_blocks:
                continue  # speculation must never cause a preemption
            seq.token_ids.extend(drafts)
            seq.num_draft_tokens = len(drafts)
            self._proposals[seq.seq_id] = proposal
            spare_tokens -= len(drafts)
            spare_blocks -= extra_blocks
            drafted.append(seq)
        return drafted


def mask_verified_positions(
    structured: StructuredOutputManager,
    grammar: GrammarMatcher,
    drafts: list[int],
    logits: torch.Tensor,
    drafted_masks: torch.Tensor | None = None,
) -> None:
    """Row i of `logits` gets the grammar's mask after drafts[:i] (drafts were checked at proposal time).
    `drafted_masks` are those rows as the draft model filled them under the same grammar state, so only
    the rows after them (the bonus row) are filled here.

    When the last draft is the grammar's stop token, the bonus row after it stays unmasked: a terminated
    grammar has no mask, and the sequence finishes on the stop token before a bonus token is used. A last
    draft the grammar forbids (a sampled draft-model proposal keeps one: `SpecDecoder.propose`) is masked
    out by its own row, so it is rejected and the row after it is never used.
    """
    start = time.perf_counter()
    backend = structured.backend
    bitmask = backend.allocate_bitmask(len(drafts) + 1)
    reused = 0 if drafted_masks is None else min(len(drafted_masks), len(drafts))
    if reused:
        bitmask[:reused] = drafted_masks[:reused]  # type: ignore[index]
    rows: list[int] = []
    accepted = 0
    for i, token in enumerate([*drafts, None]):
        if grammar.is_terminated():
            break
        if i >= reused:
            backend.fill_bitmask([grammar], bitmask, [i])
        rows.append(i)
        if token is None:
            break
        if not grammar.accept_token(token):
            if i < len(drafts) - 1:
                raise RuntimeError(f"draft token {token} violates the request's grammar")
            break
        accepted += 1
    grammar.rollback(accepted)
    backend.apply_bitmask(logits, bitmask, rows)
    stats = structured.stats
    stats.masked_rows += len(rows)
    stats.reused_rows += min(reused, len(rows))
    stats.mask_seconds += time.perf_counter() - start
