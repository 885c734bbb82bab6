"""Draft-model proposer: a small model with the target's tokenizer guesses the next k tokens.

The draft keeps its own paged KV cache (its own ModelRunner and BlockManager) and one shadow sequence per
target sequence. Each proposal first brings the shadow in line with the target's tokens -- dropping what
verification rejected (the computed count moves back, blocks past the end are freed) and computing what is
new -- then decodes k tokens. All speculating sequences go through the draft together: one forward for the
catch-up chunks, then one batched forward per drafted token.

Draft tokens are sampled from the draft's distribution q after the request's own sampling transforms, and q
is returned with them, so verification can accept with min(1, p/q) and resample from max(0, p - q). Given the
engine's grammar masks, each drafted token is sampled under the request's grammar, advanced through the drafts
and rolled back afterwards: q then gives nothing to what the target cannot emit, so no draft is spent on it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from switchyard.engine.block_manager import BlockManager
from switchyard.engine.model_runner import ModelRunner
from switchyard.engine.row_argmax import row_argmax
from switchyard.engine.sampler import Sampler, SamplingBatch, SamplingRow
from switchyard.engine.sequence import Sequence
from switchyard.engine.structured.backend import GrammarMatcher
from switchyard.models.llama import LlamaForCausalLM

GrammarMask = Callable[[torch.Tensor, list[GrammarMatcher | None]], torch.Tensor | None]
"""Forbids, in place, each row's tokens its matcher refuses, and returns the bitmask it applied, row i for
logits row i (`StructuredOutputManager.mask_logits` with `keep=True`)."""


@dataclass
class DraftProposal:
    tokens: list[int]
    probs: torch.Tensor | None = None
    """[len(tokens), vocab] draft distributions the tokens were sampled from; None for greedy requests and
    point-mass proposers (n-gram)."""
    masks: torch.Tensor | None = None
    """[len(tokens), bitmask words]: row i is the grammar's mask after tokens[:i], filled while drafting under
    the grammar; verification applies these rows instead of filling them again. None without a grammar."""

    def truncated(self, length: int) -> DraftProposal:
        return DraftProposal(
            self.tokens[:length],
            None if self.probs is None else self.probs[:length],
            None if self.masks is None else self.masks[:length],
        )


class DraftModelProposer:
    def __init__(
        self,
        model: LlamaForCausalLM,
        target_vocab_size: int,
        dtype: torch.dtype,
        device: torch.device,
        num_blocks: int,
        block_size: int,
        sampler: Sampler,
        kv_dtype: torch.dtype | None = None,
    ) -> None:
        """`model` is loaded by the engine, which sizes both KV caches from one budget."""
        self.model = model
        vocab = self.model.config.vocab_size
        if vocab > target_vocab_size:
            raise ValueError(f"draft vocabulary ({vocab}) is larger than the target's ({target_vocab_size})")
        self.target_vocab_size = target_vocab_size
        self.block_manager = BlockManager(num_blocks, block_size)
        self.runner = ModelRunner(self.model, num_blocks, block_size, dtype, device, kv_dtype)
        self.sampler = sampler
        self._shadows: dict[int, Sequence] = {}
        self._ids = itertools.count()

    def release(self, seq_id: int) -> None:
        """Free the shadow of a finished sequence."""
        shadow = self._shadows.pop(seq_id, None)
        if shadow is not None:
            self.block_manager.free(shadow)

    def release_finished(self, live_seq_ids: set[int]) -> None:
        """Free the shadows of sequences no longer running (a preempted one keeps its shadow: its tokens and
        so the draft's KV stay valid)."""
        for seq_id in [s for s in self._shadows if s not in live_seq_ids]:
            self.release(seq_id)

    @property
    def num_shadows(self) -> int:
        return len(self._shadows)

    def propose(
        self, requests: list[tuple[Sequence, int]], mask: GrammarMask | None = None
    ) -> dict[int, DraftProposal]:
        """Draft up to k tokens for each (target sequence, k); a sequence the cache cannot hold gets none. With
        `mask`, a sequence with a grammar drafts only tokens it allows, and stops where the grammar ends."""
        shadows = []
        # The draft's cache has the target's block count but no prefix sharing, so it can fill up while the
        # target's does not: each shadow needs room besides the blocks the shadows before it will take.
        reserved = 0
        for seq, k in requests:
            shadow = self._sync(seq)
            # Room for the catch-up chunk and all k drafts (the last draft is sampled, never computed).
            needed = self.block_manager.blocks_needed(
                shadow, shadow.num_tokens - shadow.num_computed_tokens + k
            )
            if needed > self.block_manager.num_free_blocks - reserved:
                continue
            reserved += needed
            shadows.append((seq, shadow, k))
        proposals = {seq.seq_id: DraftProposal([]) for seq, _, _ in shadows}
        active = [(seq, shadow, k) for seq, shadow, k in shadows if k > 0]
        advanced: dict[int, int] = {}  # seq_id -> drafts its grammar accepted
        try:
            self._draft(active, proposals, mask, advanced)
        finally:
            for seq, _, _ in shadows:
                if seq.seq_id in advanced and seq.grammar is not None:
                    seq.grammar.rollback(advanced[seq.seq_id])
        return {seq_id: p for seq_id, p in proposals.items() if p.tokens}

    def _draft(
        self,
        active: list[tuple[Sequence, Sequence, int]],
        proposals: dict[int, DraftProposal],
        mask: GrammarMask | None,
        advanced: dict[int, int],
    ) -> None:
        """One batched draft forward per drafted token, until every sequence has its k tokens or stopped."""
        while active:
            scheduled = []
            for _, shadow, _ in active:
                num_new = shadow.num_tokens - shadow.num_computed_tokens
                copies = self.block_manager.allocate_slots(shadow, num_new)
                assert copies == [], "draft shadows never share blocks"
                scheduled.append((shadow, num_new))
            result = self.runner.execute(scheduled, set())
            for shadow, num_new in scheduled:
                shadow.num_computed_tokens += num_new
            by_id = {s.seq_id: i for i, s in enumerate(result.sampled_seqs)}
            logits = torch.stack([result.logits[by_id[shadow.seq_id]] for _, shadow, _ in active])
            rows = [(seq, shadow.token_ids[seq.request.num_prompt_tokens :]) for seq, shadow, _ in active]
            tokens, probs, drawable, masks = sample_drafts(
                self.sampler, self.target_vocab_size, rows, logits, mask
            )
            still = []
            for row, (seq, shadow, k) in enumerate(active):
                if not drawable[row]:  # all the grammar allows lies beyond a smaller draft vocabulary
                    continue
                shadow.token_ids.append(tokens[row])
                going = extend_proposal(
                    proposals[seq.seq_id], seq, tokens[row], probs, masks, row, mask, advanced
                )
                if going and len(proposals[seq.seq_id].tokens) < k:
                    still.append((seq, shadow, k))
            active = still

    def _sync(self, seq: Sequence) -> Sequence:
        """The shadow of seq with exactly seq's tokens; its KV is kept for the longest common prefix."""
        shadow = self._shadows.get(seq.seq_id)
        if shadow is None:
            shadow = Sequence(seq_id=next(self._ids), request=seq.request, sample_index=0, token_ids=[])
            self._shadows[seq.seq_id] = shadow
        target = seq.token_ids
        common = 0
        limit = min(len(shadow.token_ids), len(target))
        while common < limit and shadow.token_ids[common] == target[common]:
            common += 1
        shadow.token_ids = list(target)
        shadow.num_computed_tokens = min(shadow.num_computed_tokens, common, len(target) - 1)
        self.block_manager.trim(shadow, shadow.num_computed_tokens)
        return shadow


def extend_proposal(
    proposal: DraftProposal,
    seq: Sequence,
    token: int,
    probs: torch.Tensor | None,
    masks: torch.Tensor | None,
    row: int,
    mask: GrammarMask | None,
    advanced: dict[int, int],
) -> bool:
    """Append one drafted token (and its q and grammar-mask rows) to seq's proposal; advance seq's grammar
    through it, counting in `advanced` what the caller must roll back. False when drafting must stop here."""
    proposal.tokens.append(token)
    if probs is not None and not seq.request.params.greedy:
        row_probs = probs[row : row + 1]
        proposal.probs = row_probs if proposal.probs is None else torch.cat([proposal.probs, row_probs])
    if masks is not None and seq.grammar is not None:
        row_mask = masks[row : row + 1]
        proposal.masks = row_mask if proposal.masks is None else torch.cat([proposal.masks, row_mask])
    if mask is not None and seq.grammar is not None:
        # Under the mask the grammar accepts the token; were a backend's mask and matcher ever to disagree,
        # the proposal ends here and `SpecDecoder.propose` checks it as any other.
        if not seq.grammar.accept_token(token):
            return False
        advanced[seq.seq_id] = advanced.get(seq.seq_id, 0) + 1
        if seq.grammar.is_terminated():  # the stop token: nothing follows it
            return False
    return True


def sample_drafts(
    sampler: Sampler,
    target_vocab_size: int,
    rows: list[tuple[Sequence, list[int]]],
    logits: torch.Tensor,
    mask: GrammarMask | None,
) -> tuple[list[int], torch.Tensor | None, list[bool], torch.Tensor | None]:
    """Draw one draft token per (target sequence, its output tokens so far, drafts included) row, after the
    request's own sampling transforms. Returns the tokens, the distributions they were drawn from (None when
    all rows are greedy), whether the row had anything to draw (False only where the grammar's tokens are all
    outside a smaller draft vocabulary), and the grammar bitmask applied to each row (None without grammars)."""
    logits = logits.float()
    if logits.shape[-1] < target_vocab_size:  # a smaller draft vocabulary: the rest is impossible
        pad = logits.new_full((logits.shape[0], target_vocab_size - logits.shape[-1]), float("-inf"))
        logits = torch.cat([logits, pad], dim=-1)
    drawable = [True] * len(rows)
    masks = None
    matchers = [seq.grammar for seq, _ in rows] if mask is not None else []
    if any(m is not None for m in matchers):
        assert mask is not None
        masks = mask(logits, matchers)
        drawable = torch.isfinite(logits).any(dim=-1).tolist()
        logits[~torch.tensor(drawable, device=logits.device)] = 0.0  # sampled, then dropped by the caller
    if all(seq.request.params.greedy for seq, _ in rows):
        return row_argmax(logits).tolist(), None, drawable, masks
    batch = SamplingBatch.build(
        [
            SamplingRow(
                params=seq.request.params,
                prompt_token_ids=seq.request.prompt_token_ids,
                output_token_ids=outputs,
                generator=seq.generator,  # a seeded row needs its generator; only the draws below use it
                eos_token_ids=seq.request.eos_token_ids,
                bad_words_token_ids=seq.request.bad_words_token_ids,
            )
            for seq, outputs in rows
        ],
        logits.shape[-1],
        logits.device,
    )
    probs = sampler.probabilities(logits, batch)
    tokens = []
    for row, (seq, _) in enumerate(rows):
        if seq.request.params.greedy:
            tokens.append(int(logits[row].argmax()))
        else:
            generator = seq.generator if seq.generator is not None else sampler.generator
            tokens.append(int(torch.multinomial(probs[row], 1, generator=generator).item()))
    return tokens, probs, drawable, masks
