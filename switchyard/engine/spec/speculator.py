"""Speculator proposer: guesses the next k tokens from the target's own last hidden state (`models.speculator`).

The engine hands it, after each sampling or verification, the target's hidden state at the position whose
logits gave the sequence's newest token (`observe`). A proposal then runs the speculator's k small steps for
all speculating sequences at once: no draft forward pass, no draft KV cache, no prompt prefill, which on a CPU
with a small target is where a separate draft model's cost goes.

A state is only used while it still belongs to the sequence's newest token (the token count it was recorded
at); after a preemption, an abort of the step or anything else that moves the sequence, the sequence decodes
plainly for one step and gets a fresh state. Drafted tokens are sampled like a draft model's
(`draft_proposer.sample_drafts`), with their q returned, so verification keeps the target's output law.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Protocol

import torch

from switchyard.engine.sampler import Sampler
from switchyard.engine.sequence import Sequence
from switchyard.engine.spec.draft import DraftProposal, GrammarMask, extend_proposal, sample_drafts
from switchyard.models.speculator import Speculator


class NgramLookup(Protocol):
    def propose(self, token_ids: Seq[int], k: int) -> tuple[list[int], torch.Tensor | None]: ...


@dataclass(frozen=True)
class HiddenState:
    num_tokens: int
    """The sequence's token count when recorded: the state is for its token at num_tokens - 1."""
    hidden: torch.Tensor
    """[hidden] the target's final normalised hidden state that produced that token."""


class SpeculatorProposer:
    def __init__(
        self,
        model: Speculator,
        target_vocab_size: int,
        sampler: Sampler,
        lookup: NgramLookup | None = None,
        lookup_below: float = 0.0,
    ) -> None:
        """`lookup` (prompt lookup) proposes instead where the speculator's first guess has probability below
        `lookup_below`: the speculator has no view of the context, and copying from it is what lookup does."""
        if model.config.vocab_size > target_vocab_size:
            raise ValueError(
                f"speculator vocabulary ({model.config.vocab_size}) is larger than the target's "
                f"({target_vocab_size})"
            )
        self.model = model
        self.target_vocab_size = target_vocab_size
        self.sampler = sampler
        self.lookup = lookup
        self.lookup_below = lookup_below
        self._states: dict[int, HiddenState] = {}

    @property
    def num_states(self) -> int:
        return len(self._states)

    def observe(self, seq: Sequence, hidden: torch.Tensor) -> None:
        """Record the hidden state whose logits gave seq's newest token. Copied: a view would keep the whole
        step's hidden states alive for as long as the sequence waits (preempted, paused)."""
        self._states[seq.seq_id] = HiddenState(seq.num_tokens, hidden.clone())

    def release(self, seq_id: int) -> None:
        self._states.pop(seq_id, None)

    def release_finished(self, live_seq_ids: set[int]) -> None:
        for seq_id in [s for s in self._states if s not in live_seq_ids]:
            del self._states[seq_id]

    @torch.inference_mode()
    def propose(
        self, requests: list[tuple[Sequence, int]], mask: GrammarMask | None = None
    ) -> dict[int, DraftProposal]:
        """Up to k guesses for each (sequence, k) whose newest token has a recorded state; with a lookup
        fallback, prompt lookup's continuation instead where the speculator is unsure of its first guess."""
        steps = self.model.config.num_steps
        active = []
        for seq, k in requests:
            state = self._states.get(seq.seq_id)
            if state is not None and state.num_tokens == seq.num_tokens and k > 0:
                active.append((seq, k))
        if not active:
            return {}
        hidden = torch.stack([self._states[seq.seq_id].hidden for seq, _ in active]).to(self.model.dtype)
        current = torch.tensor([seq.token_ids[-1] for seq, _ in active], device=self.model.device)
        first = self.model.step(0, hidden, current)
        out: dict[int, DraftProposal] = {}
        if self.lookup is not None:
            # The choice depends on the context alone (no draw is made), so either proposal keeps the output law.
            confidence = torch.softmax(first[1].float(), dim=-1).amax(dim=-1).tolist()
            for row, (seq, k) in enumerate(active):
                if confidence[row] < self.lookup_below:
                    tokens, _ = self.lookup.propose(seq.token_ids, k)
                    if tokens:
                        out[seq.seq_id] = DraftProposal(tokens)
            if out:
                rows = [row for row, (seq, _) in enumerate(active) if seq.seq_id not in out]
                if not rows:
                    return out
                index = torch.tensor(rows, device=self.model.device)
                active = [active[row] for row in rows]
                first = (first[0].index_select(0, index), first[1].index_select(0, index))
        active = [(seq, min(k, steps)) for seq, k in active]
        unconstrained = mask is None or all(seq.grammar is None for seq, _ in active)
        if unconstrained and all(seq.request.params.greedy for seq, _ in active):
            out.update(self._propose_greedy(active, first))
        else:
            out.update(self._propose_sampled(active, first, mask))
        return out

    def _propose_sampled(
        self,
        active: list[tuple[Sequence, int]],
        first: tuple[torch.Tensor, torch.Tensor],
        mask: GrammarMask | None,
    ) -> dict[int, DraftProposal]:
        """Each drafted token drawn like a draft model's, under the request's transforms and grammar."""
        proposals = {seq.seq_id: DraftProposal([]) for seq, _ in active}
        advanced: dict[int, int] = {}  # seq_id -> drafts its grammar accepted
        hidden, logits = first
        try:
            rows = list(range(len(active)))  # rows of the batch still drafting
            for index in range(self.model.config.num_steps):
                live = [(active[row][0], active[row][0].output_token_ids + proposals[active[row][0].seq_id].tokens)
                        for row in rows]  # fmt: skip
                tokens, probs, drawable, masks = sample_drafts(
                    self.sampler, self.target_vocab_size, live, logits.float(), mask
                )
                still = []
                for position, row in enumerate(rows):
                    seq, k = active[row]
                    if not drawable[position]:
                        continue
                    going = extend_proposal(
                        proposals[seq.seq_id], seq, tokens[position], probs, masks, position, mask, advanced
                    )
                    if going and len(proposals[seq.seq_id].tokens) < k:
                        still.append((position, row))
                if not still or index + 1 == self.model.config.num_steps:
                    break
                keep = torch.tensor([position for position, _ in still], device=self.model.device)
                current = torch.tensor([tokens[position] for position, _ in still], device=self.model.device)
                hidden, logits = self.model.step(index + 1, hidden.index_select(0, keep), current)
                rows = [row for _, row in still]
        finally:
            for seq, _ in active:
                if seq.seq_id in advanced and seq.grammar is not None:
                    seq.grammar.rollback(advanced[seq.seq_id])
        return {seq_id: p for seq_id, p in proposals.items() if p.tokens}

    def _propose_greedy(
        self, active: list[tuple[Sequence, int]], first: tuple[torch.Tensor, torch.Tensor]
    ) -> dict[int, DraftProposal]:
        """Greedy rows without grammars, the common case: the guesses stay tensors and come back to Python
        once. (Stopping early where the guesses so far were unlikely to be accepted did not pay: a step costs
        less than the tokens it adds, RESULTS.md.)"""
        hidden, logits = first
        current = (
            logits[:, : self.target_vocab_size].float().argmax(dim=-1)
        )  # a bf16 argmax is 4x slower here
        guesses = [current]
        for index in range(1, max(k for _, k in active)):
            hidden, logits = self.model.step(index, hidden, current)
            current = logits[:, : self.target_vocab_size].float().argmax(dim=-1)
            guesses.append(current)
        rows = torch.stack(guesses, dim=1).tolist()
        return {seq.seq_id: DraftProposal(row[:k]) for (seq, k), row in zip(active, rows, strict=True)}
