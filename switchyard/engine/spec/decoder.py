"""Speculative decoding: propose k tokens cheaply, verify them in one target forward pass, keep the output law.

Decode is memory-bound: a forward over k+1 positions of one sequence costs about as much as over one, so when
a proposer guesses the continuation well, several tokens come out of one step.

Flow inside `LLMEngine.step()` (its speculative phases are `spec.step`):
1. Before scheduling, each eligible decoding sequence gets up to k proposed tokens appended to its tokens
   (`SpecDecoder.propose`); the scheduler then schedules 1 + k new tokens for it like a prefill chunk, so
   continuous batching, the token budget and preemption need no special case. Drafts of a sequence that was
   not scheduled in full (preempted, paused) are removed again before anything is computed.
2. The runner returns the target's logits at all 1 + k positions of such a sequence.
3. `verify` accepts drafts left to right, all sequences' verified rows in one sampling batch: greedy rows
   accept while the draft equals the token plain decoding would pick (the target's argmax after logit_bias,
   min_tokens and penalties); random rows accept draft x with probability min(1, p(x) / q(x)) and, on the
   first rejection, resample from the normalised residual max(0, p - q); when all k are accepted a bonus token
   is sampled from the last position. p is the target's distribution after the request's sampling transforms,
   q the proposer's (a point mass for n-gram proposals, so acceptance is p(x) and the residual is p without x).
   The output therefore has exactly the target's distribution (tested with a chi-square test on a tiny
   vocabulary).
4. Rejected positions are rolled back: the tokens are dropped, the computed-token count moves back to the last
   accepted position (their KV slots are simply overwritten later) and blocks past the sequence's end return to
   the free list.

With a grammar (structured outputs), a proposal is cut at its first token the grammar forbids, and each
verified position's logits are masked by the grammar state after the drafts before it, so verification
samples from the constrained distribution.

Three proposers: n-gram prompt lookup (`ngram`, free, for copying), a draft model (`draft`: its own paged
KV cache and forward passes) and a speculator (`speculator`: small look-ahead heads on the target's
own hidden state, which the engine hands over after each sampling or verification, `observe`). On a CPU with
a small target a draft model's step costs most of a target step, and only the speculator pays (RESULTS.md).

Falls back to plain decoding for requests with n > 1, logprobs or prompt logprobs or `speculative=False`, and for
the whole step when more than `max_batch_size` sequences are running (speculation stops paying once the batch
makes the step compute-bound; see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

import torch

from switchyard.engine.row_argmax import row_argmax
from switchyard.engine.sampler import Sampler, SamplingBatch, SamplingRow, greedy_argmax
from switchyard.engine.sequence import Sequence
from switchyard.engine.spec.draft import DraftModelProposer, DraftProposal
from switchyard.engine.spec.ngram import NgramProposer, Proposer
from switchyard.engine.spec.speculator import SpeculatorProposer
from switchyard.engine.structured.manager import StructuredOutputManager

SPECULATIVE_METHODS = ("ngram", "draft", "speculator")


@dataclass(frozen=True)
class SpecDecodeConfig:
    method: str = "ngram"
    """`ngram` (prompt lookup, no extra model), `draft` (a small model with the same tokenizer) or `speculator`
    (look-ahead heads on the target's hidden state, `models.speculator`)."""
    draft_model: str | None = None
    """The draft model's or the speculator's folder for methods `draft` and `speculator`."""
    num_speculative_tokens: int = 4
    ngram_max: int = 4
    """Longest suffix n-gram looked up in the sequence's history."""
    ngram_min: int = 2
    max_batch_size: int = 8
    """Above this many running sequences, no speculation (it stops paying once the step is compute-bound)."""
    adaptive: bool = False
    """Draft and speculator methods: time speculative and plain decode steps while serving and speculate only
    where it is faster (`governor.SpeculationGovernor`). An n-gram step without a match costs what a plain
    step does, and its matches come in bursts (copying), which short probes of each mode would misjudge:
    measured on the bundled tasks, governing n-gram lookup cut its 1.47x to 1.05x."""
    lookup_below: float = 0.6
    """Speculator method: where the speculator gives its first guess less probability than this, propose
    prompt lookup's continuation instead, when there is one (0: never). The speculator cannot see the context,
    so copying from it is its weak spot and lookup's strength. On the bundled tasks the mix makes 3.07 tokens
    a verification against the speculator's 2.29 and lookup's 1.65 (thresholds 0.3-0.9 within 2%;
    `benchmarks/speculator_mix.py`)."""
    mask_drafts: bool = True
    """Draft and speculator methods: sample each drafted token under the request's grammar mask (one mask fill
    per drafted token). Unmasked, a draft proposes tokens the grammar forbids, and each such proposal is cut
    there or verified to a rejection; masked, q has p's support under the grammar and more drafts are
    accepted."""

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ValueError(
                f"unknown speculative method {self.method!r}; supported: {', '.join(SPECULATIVE_METHODS)}"
            )
        if self.method in ("draft", "speculator") and not self.draft_model:
            raise ValueError(
                f"speculative method {self.method!r} needs a model (--speculative-model): a draft model for "
                "'draft', a speculator folder for 'speculator'"
            )
        if self.adaptive and self.method == "ngram":
            raise ValueError(
                "adaptive speculation applies to the draft and speculator methods, not ngram "
                "(--speculative-method draft or speculator)"
            )
        if not 0.0 <= self.lookup_below <= 1.0:
            raise ValueError(f"lookup_below must be in [0, 1], got {self.lookup_below}")
        if self.num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be >= 1")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError("need 1 <= ngram_min <= ngram_max")


@dataclass
class SpecDecodeStats:
    steps: int = 0
    """Sequence-steps that verified at least one proposal."""
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    """Tokens produced by verifying sequences (accepted drafts + one bonus or corrected token each)."""
    by_accepted: dict[int, int] = field(default_factory=dict)
    forbidden_drafts: int = 0
    """Sampled drafts a grammar forbids, kept as the proposal's last token so verification rejects them."""

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_tokens_per_step(self) -> float:
        return self.emitted / self.steps if self.steps else 0.0


@dataclass
class PendingVerification:
    """One sequence's drafts waiting for the verdict of the target's logits at their positions."""

    seq: Sequence
    drafts: list[int]
    logits: torch.Tensor
    """[len(drafts) + 1, vocab]: the target's logits after each draft and after the last (the bonus row)."""
    draft_probs: torch.Tensor | None = None
    """[len(drafts), vocab]: the proposer's distributions; None for point masses (n-gram, greedy drafts)."""


class SpecDecoder:
    def __init__(
        self,
        config: SpecDecodeConfig,
        sampler: Sampler,
        draft: DraftModelProposer | None = None,
        speculator: SpeculatorProposer | None = None,
    ) -> None:
        self.config = config
        self.sampler = sampler
        self.proposer: Proposer = NgramProposer(config.ngram_min, config.ngram_max)
        self.draft = draft
        self.speculator = speculator
        self.stats = SpecDecodeStats()

    @property
    def wants_hidden_states(self) -> bool:
        """Whether the engine must hand over the target's hidden states (`observe`)."""
        return self.speculator is not None

    def observe(self, seq: Sequence, hidden: torch.Tensor) -> None:
        """The target's hidden state whose logits gave seq's newest token (speculator method)."""
        if self.speculator is not None:
            self.speculator.observe(seq, hidden)

    def release(self, seq_id: int) -> None:
        """Forget a finished sequence's proposer state."""
        if self.draft is not None:
            self.draft.release(seq_id)
        if self.speculator is not None:
            self.speculator.release(seq_id)

    @staticmethod
    def eligible(seq: Sequence) -> bool:
        params = seq.request.params
        return (
            params.speculative
            and params.n == 1
            and params.logprobs is None
            and params.prompt_logprobs is None
            and seq.num_computed_tokens == seq.num_tokens - 1
            and seq.num_output_tokens > 0
        )

    def propose(
        self,
        requests: list[tuple[Sequence, int]],
        live_seq_ids: set[int],
        structured: StructuredOutputManager | None = None,
    ) -> dict[int, DraftProposal]:
        """seq_id -> proposal (draft tokens, their draft distributions or None, the grammar masks filled while
        drafting or None) for each (sequence, room) pair; room leaves space for the bonus token. Proposals are
        cut at their first token a grammar forbids; a draft model's sampled proposal keeps that token as its
        last. Verification then rejects it (the grammar gives
        it probability 0) and draws from the residual, as speculative sampling must: cutting before it would
        draw that position from the target alone, which biases the output towards what the draft avoided.
        `live_seq_ids` are the running sequences: draft state of any other is released. With `structured` (the
        engine's grammar masks) and `mask_drafts`, a draft model samples under the grammar and proposes nothing
        it forbids."""
        wanted = [(seq, min(self.config.num_speculative_tokens, room)) for seq, room in requests]
        wanted = [(seq, k) for seq, k in wanted if k >= 1]
        learned = self.draft or self.speculator
        if learned is not None:
            learned.release_finished(live_seq_ids | {seq.seq_id for seq, _ in wanted})
            mask = None
            if structured is not None and self.config.mask_drafts:
                mask = functools.partial(structured.mask_logits, keep=True)
            found = learned.propose(wanted, mask)
        else:
            found = {seq.seq_id: DraftProposal(*self.proposer.propose(seq.token_ids, k)) for seq, k in wanted}
        out = {}
        for seq, k in wanted:
            proposal = found.get(seq.seq_id, DraftProposal([]))
            drafts, probs = proposal.tokens[:k], proposal.probs
            if seq.grammar is not None:  # cut the proposal at its first token the grammar forbids
                valid = 0
                forbidden = False
                for token in drafts:
                    # Nothing follows the grammar's stop token (asking a terminated matcher logs a warning).
                    if seq.grammar.is_terminated():
                        break
                    if not seq.grammar.accept_token(token):
                        forbidden = True
                        break
                    valid += 1
                seq.grammar.rollback(valid)
                keep = valid + 1 if forbidden and probs is not None else valid
                self.stats.forbidden_drafts += keep - valid
                drafts = drafts[:keep]
            if drafts:
                out[seq.seq_id] = proposal.truncated(len(drafts))
        return out

    def verify(self, pending: Seq[PendingVerification]) -> list[tuple[list[int], int]]:
        """The tokens to emit after verifying each sequence's drafts, and how many drafts were accepted.

        Every verified row of every sequence goes through one sampling batch, so the sampling transforms
        (penalties, temperature, top-p...) run once per step rather than once per sequence; only the
        accept/reject walk and its random draws are per sequence, in order, from each sequence's generator.
        Each sequence's `token_ids` must not contain its drafts any more."""
        if not pending:
            return []
        rows = [row for item in pending for row in self._sampling_rows(item.seq, item.drafts)]
        logits = torch.cat([item.logits for item in pending])
        batch = SamplingBatch.build(rows, vocab_size=logits.shape[-1], device=logits.device)
        if batch.all_greedy:
            # What plain decoding would pick at each position: logit_bias, min_tokens and penalties included.
            targets = greedy_argmax(logits, batch).tolist()
            probs = None
        else:
            probs = self.sampler.probabilities(logits.float(), batch)
            targets = row_argmax(probs).tolist()  # greedy rows are one-hot at plain decoding's pick
        results = []
        start = 0
        for item in pending:
            k = len(item.drafts)
            if item.seq.request.params.greedy:
                accepted = 0
                while accepted < k and item.drafts[accepted] == targets[start + accepted]:
                    accepted += 1
                emitted = [*item.drafts[:accepted], targets[start + accepted]]
            else:
                assert probs is not None
                emitted, accepted = self._accept_sampled(item, probs[start : start + k + 1])
            start += k + 1
            self.stats.steps += 1
            self.stats.proposed += k
            self.stats.accepted += accepted
            self.stats.emitted += len(emitted)
            self.stats.by_accepted[accepted] = self.stats.by_accepted.get(accepted, 0) + 1
            results.append((emitted, accepted))
        return results

    @staticmethod
    def _sampling_rows(seq: Sequence, drafts: list[int]) -> list[SamplingRow]:
        """One sampling row per verified position: its output so far is seq's output plus the drafts before it."""
        return [SamplingRow.of_sequence(seq, drafts[:i]) for i in range(len(drafts) + 1)]

    def _accept_sampled(self, item: PendingVerification, probs: torch.Tensor) -> tuple[list[int], int]:
        """Speculative sampling's walk over one sequence's drafts; `probs` are its verified rows' p."""
        drafts = item.drafts
        k = len(drafts)
        generator = item.seq.generator if item.seq.generator is not None else self.sampler.generator
        uniforms = torch.rand(k, generator=generator, device=probs.device).tolist()
        positions = torch.arange(k, device=probs.device)
        draft_ids = torch.tensor(drafts, dtype=torch.long, device=probs.device)
        p_drafts = probs[positions, draft_ids].tolist()
        q = None if item.draft_probs is None else item.draft_probs[:k].to(probs.device, torch.float32)
        # q is a point mass on the draft (n-gram) or the proposer's distribution: accept with min(1, p/q).
        q_drafts = [1.0] * k if q is None else q[positions, draft_ids].tolist()
        for i, draft in enumerate(drafts):
            if uniforms[i] * q_drafts[i] < p_drafts[i]:  # u < p/q without dividing by q
                continue
            if q is None:
                residual = probs[i].clone()
                residual[draft] = 0.0
            else:
                residual = (probs[i] - q[i]).clamp_(min=0.0)
            total = float(residual.sum())
            if total <= 0.0:  # p was a point mass on the draft: cannot happen after a rejection, but be safe
                return drafts[: i + 1], i + 1
            token = int(torch.multinomial(residual / total, 1, generator=generator).item())
            return [*drafts[:i], token], i
        bonus = int(torch.multinomial(probs[k], 1, generator=generator).item())
        return [*drafts, bonus], k
