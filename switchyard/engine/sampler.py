"""Turns one engine step's logits into next tokens, vectorised over the batch.

Per-row parameters become tensors once per step (`SamplingBatch.build`), so each stage below is a handful of
batched tensor ops, and a stage no row needs is skipped for the whole batch (no sort unless a row uses top-p,
no token counts unless a row uses a penalty).

Processing order, the same for `Sampler.__call__` and `Sampler.probabilities`:

1. logit_bias: added to the raw logits.
2. min_tokens: EOS ids and stop_token_ids get -inf while the row has fewer than min_tokens output tokens.
   This happens whatever `ignore_eos` says; that flag only changes when the engine stops a request.
   allowed_token_ids: every other token gets -inf.
   bad_words: a bad word's last token gets -inf where the output ends with the word's other tokens. A row
   left with no finite logit (a grammar that forces a banned word) keeps its logits from before this ban:
   the grammar wins, since a row with nothing to sample cannot go on at all.
3. repetition_penalty (HF/vLLM): for tokens seen in the prompt or the output, positive logits are divided
   by the penalty and negative ones multiplied by it.
4. presence and frequency penalties (OpenAI): logit -= frequency * count + presence * (count > 0), with
   counts taken over output tokens only.
5. temperature: logits / temperature. Rows with temperature below 1e-5 are greedy (dividing by such a value
   overflows float32, as vLLM also reasons): they take the argmax of the logits after step 4, which the
   later stages could not change anyway.
6. top_k: keep the k largest logits (tokens tied with the k-th are kept too).
7. top_p: keep the smallest set of most likely tokens whose probability reaches top_p; never empty.
8. min_p: drop tokens whose probability is below min_p times the largest probability.

Random rows then draw by the exponential race: with E_i ~ Exp(1) independent, argmax_i p_i / E_i is
distributed as p. Unlike torch.multinomial this lets a seeded row take its V noise values from its own
generator, so its tokens do not depend on what else is in the batch, while unseeded rows share one draw.

Logprobs are those of the raw logits (log_softmax before any stage above), which is vLLM's default.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from switchyard.engine.row_argmax import row_argmax
from switchyard.engine.sampling_params import SamplingParams
from switchyard.errors import InvalidRequestError

if TYPE_CHECKING:
    from switchyard.engine.sequence import Sequence as EngineSequence
    from switchyard.engine.structured.manager import StructuredOutputManager

GREEDY_TEMPERATURE = 1e-5
"""Temperatures below this are sampled greedily."""

_NEG_INF = float("-inf")


@dataclass
class SamplingRow:
    """What the sampler needs to know about one row (one sequence) of the step."""

    params: SamplingParams
    prompt_token_ids: Sequence[int]
    """Counted by repetition_penalty together with the output, as vLLM does."""
    output_token_ids: Sequence[int]
    """Counted by presence/frequency penalties and compared with min_tokens."""
    generator: torch.Generator | None = None
    """The row's own random stream, required when params.seed is set; the engine creates it once per
    sequence (see `new_generator`) and keeps it across steps so the whole completion is reproducible."""
    eos_token_ids: tuple[int, ...] = ()
    """Suppressed together with params.stop_token_ids while the output is shorter than min_tokens."""
    bad_words_token_ids: Sequence[tuple[int, ...]] = ()
    """params.bad_words as token sequences (the engine tokenizes them once, at admission)."""

    @classmethod
    def of_sequence(cls, seq: EngineSequence, drafts: Sequence[int] = ()) -> SamplingRow:
        """The row of `seq`'s next token; with `drafts`, of the token after those speculative tokens (a
        verification row counts them as output already)."""
        request = seq.request
        output = seq.output_token_ids
        output.extend(drafts)  # a fresh slice: extending it leaves seq's tokens alone
        return cls(
            params=request.params,
            prompt_token_ids=request.prompt_token_ids,
            output_token_ids=output,
            generator=seq.generator,
            eos_token_ids=request.eos_token_ids,
            bad_words_token_ids=request.bad_words_token_ids,
        )


def new_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """A generator for a seeded row; put it on the logits' device so its noise needs no copy."""
    generator = torch.Generator(device=torch.device(device))
    generator.manual_seed(seed)
    return generator


def check_token_ids(params: SamplingParams, vocab_size: int) -> None:
    """Raise InvalidRequestError if logit_bias or stop_token_ids name a token outside the vocabulary.

    The engine should call this when it admits a request, so a bad id never reaches a batch.
    """
    bias_ids = [int(t) for t in (params.logit_bias or {})]
    if any(not 0 <= t < vocab_size for t in bias_ids):
        raise InvalidRequestError(f"logit_bias token ids must be in [0, {vocab_size})", param="logit_bias")
    if any(not 0 <= t < vocab_size for t in params.stop_token_ids):
        raise InvalidRequestError(f"stop_token_ids must be in [0, {vocab_size})", param="stop_token_ids")
    if params.allowed_token_ids is not None and any(
        not 0 <= t < vocab_size for t in params.allowed_token_ids
    ):
        raise InvalidRequestError(
            f"allowed_token_ids must be in [0, {vocab_size})", param="allowed_token_ids"
        )


@dataclass
class SamplingBatch:
    """Per-step parameter tensors for the rows being sampled; a field is None when no row needs its stage."""

    num_rows: int
    vocab_size: int
    device: torch.device
    greedy: torch.Tensor
    """[N] bool: rows sampled by argmax."""
    all_greedy: bool
    any_greedy: bool
    temperatures: torch.Tensor | None
    """[N] float32, 1.0 on greedy rows."""
    top_k: torch.Tensor | None
    """[N] long; vocab_size where top-k is off."""
    max_top_k: int
    """Largest enabled top_k, so the top-k-only path can call torch.topk with a small k."""
    top_p: torch.Tensor | None
    """[N] float32; +inf where top-p is off, so float rounding in the cumulative sum never drops tokens."""
    log_min_p: torch.Tensor | None
    """[N] float32 log(min_p): comparing logits with max + log(min_p) avoids a softmax."""
    repetition_penalty: torch.Tensor | None
    """[N] float32, 1.0 where off."""
    presence_penalty: torch.Tensor | None
    """[N] float32; set together with frequency_penalty."""
    frequency_penalty: torch.Tensor | None
    prompt_ids: torch.Tensor | None
    """[N, Lp] long, padded with vocab_size; empty rows where repetition_penalty is off."""
    output_ids: torch.Tensor | None
    """[N, Lo] long, padded with vocab_size; empty rows that use no penalty."""
    logit_bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
    """(rows, token ids, values) of every bias entry."""
    suppressed: tuple[torch.Tensor, torch.Tensor] | None
    """(rows, token ids) forced to -inf by min_tokens."""
    allowed: tuple[torch.Tensor, torch.Tensor] | None
    """(rows [R], mask [R, V] bool) of rows with allowed_token_ids; True where a token may be sampled."""
    banned: tuple[torch.Tensor, torch.Tensor] | None
    """(rows, token ids) that bad_words forbid at this step."""
    seeded: list[tuple[int, torch.Generator]]
    """(row, generator) of random rows that carry their own generator."""
    shared_noise: bool
    """Whether some random row has no generator of its own and so needs the batched draw."""
    num_top_logprobs: int | None
    """K = largest `logprobs` asked for in the batch; None when no row asked."""

    @classmethod
    def build(cls, rows: Sequence[SamplingRow], vocab_size: int, device: torch.device | str) -> SamplingBatch:
        """Gather the rows' parameters into tensors on `device`; one pass over rows, none over tokens."""
        device = torch.device(device)
        n = len(rows)
        greedy: list[bool] = []
        temperatures: list[float] = []
        top_k: list[int] = []
        top_p: list[float] = []
        min_p: list[float] = []
        repetition: list[float] = []
        presence: list[float] = []
        frequency: list[float] = []
        prompt_lists: list[Sequence[int]] = []
        output_lists: list[Sequence[int]] = []
        bias_rows: list[int] = []
        bias_ids: list[int] = []
        bias_values: list[float] = []
        suppress_rows: list[int] = []
        suppress_ids: list[int] = []
        allowed_rows: list[int] = []
        allowed_ids: list[int] = []
        allowed_owner: list[int] = []
        banned_rows: list[int] = []
        banned_ids: list[int] = []
        seeded: list[tuple[int, torch.Generator]] = []
        shared_noise = False
        top_logprobs: list[int] = []

        for i, row in enumerate(rows):
            p = row.params
            if p.seed is not None and row.generator is None:
                raise ValueError(f"row {i} has seed={p.seed} but no generator; see new_generator()")
            is_greedy = p.temperature < GREEDY_TEMPERATURE
            greedy.append(is_greedy)
            # Filtering stages are irrelevant to greedy rows, so they count as "off" there.
            temperatures.append(1.0 if is_greedy else p.temperature)
            top_k.append(p.top_k if not is_greedy and 0 < p.top_k < vocab_size else vocab_size)
            top_p.append(p.top_p if not is_greedy and p.top_p < 1.0 else math.inf)
            min_p.append(p.min_p if not is_greedy else 0.0)
            repetition.append(p.repetition_penalty)
            presence.append(p.presence_penalty)
            frequency.append(p.frequency_penalty)
            uses_penalty = p.repetition_penalty != 1.0 or p.presence_penalty != 0 or p.frequency_penalty != 0
            prompt_lists.append(row.prompt_token_ids if p.repetition_penalty != 1.0 else ())
            output_lists.append(row.output_token_ids if uses_penalty else ())
            if p.logit_bias:
                for token, value in p.logit_bias.items():
                    bias_rows.append(i)
                    bias_ids.append(int(token))
                    bias_values.append(float(value))
            if len(row.output_token_ids) < p.min_tokens:
                # An id outside the logits can never be sampled, so there is nothing to suppress.
                for token in set(row.eos_token_ids) | set(p.stop_token_ids):
                    if 0 <= token < vocab_size:
                        suppress_rows.append(i)
                        suppress_ids.append(token)
            if p.allowed_token_ids is not None:
                allowed_owner.extend([len(allowed_rows)] * len(p.allowed_token_ids))
                allowed_ids.extend(p.allowed_token_ids)
                allowed_rows.append(i)
            for token in _banned_next_tokens(row.bad_words_token_ids, row.output_token_ids):
                banned_rows.append(i)
                banned_ids.append(token)
            if not is_greedy:
                if row.generator is not None:
                    seeded.append((i, row.generator))
                else:
                    shared_noise = True
            if p.logprobs is not None:
                top_logprobs.append(p.logprobs)

        if bias_ids and (min(bias_ids) < 0 or max(bias_ids) >= vocab_size):
            raise InvalidRequestError(
                f"logit_bias token ids must be in [0, {vocab_size})", param="logit_bias"
            )
        allowed = None
        if allowed_rows:
            # Ids past the logits (a draft's smaller vocabulary) cannot be sampled anyway.
            pairs = [(r, t) for r, t in zip(allowed_owner, allowed_ids, strict=True) if 0 <= t < vocab_size]
            mask = torch.zeros(len(allowed_rows), vocab_size, dtype=torch.bool)
            if pairs:
                owners, ids = zip(*pairs, strict=True)
                mask[list(owners), list(ids)] = True
            allowed = (torch.tensor(allowed_rows, dtype=torch.long, device=device), mask.to(device))
        banned_pairs = [(r, t) for r, t in zip(banned_rows, banned_ids, strict=True) if 0 <= t < vocab_size]

        def floats(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=device)

        def longs(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=device)

        any_greedy = any(greedy)
        all_greedy = n > 0 and all(greedy)
        random = not all_greedy
        uses_top_k = random and any(k < vocab_size for k in top_k)
        uses_repetition = any(r != 1.0 for r in repetition)
        uses_counts = any(p != 0 for p in presence) or any(f != 0 for f in frequency)
        return cls(
            num_rows=n,
            vocab_size=vocab_size,
            device=device,
            greedy=torch.tensor(greedy, dtype=torch.bool, device=device),
            all_greedy=all_greedy,
            any_greedy=any_greedy,
            temperatures=floats(temperatures) if random and any(t != 1.0 for t in temperatures) else None,
            top_k=longs(top_k) if uses_top_k else None,
            max_top_k=max((k for k in top_k if k < vocab_size), default=vocab_size),
            top_p=floats(top_p) if random and any(t < 1.0 for t in top_p) else None,
            log_min_p=floats([math.log(m) if m > 0 else _NEG_INF for m in min_p])
            if random and any(m > 0 for m in min_p)
            else None,
            repetition_penalty=floats(repetition) if uses_repetition else None,
            presence_penalty=floats(presence) if uses_counts else None,
            frequency_penalty=floats(frequency) if uses_counts else None,
            prompt_ids=_padded_ids(prompt_lists, vocab_size, device) if uses_repetition else None,
            output_ids=_padded_ids(output_lists, vocab_size, device)
            if uses_repetition or uses_counts
            else None,
            logit_bias=(longs(bias_rows), longs(bias_ids), floats(bias_values)) if bias_rows else None,
            suppressed=(longs(suppress_rows), longs(suppress_ids)) if suppress_rows else None,
            allowed=allowed,
            banned=(longs([r for r, _ in banned_pairs]), longs([t for _, t in banned_pairs]))
            if banned_pairs
            else None,
            seeded=seeded,
            shared_noise=shared_noise,
            num_top_logprobs=max(top_logprobs) if top_logprobs else None,
        )


@dataclass
class SamplerOutput:
    """The step's sampled tokens and their logprobs under the raw logits."""

    token_ids: torch.Tensor
    """[N] long."""
    logprobs: torch.Tensor
    """[N] float32: log_softmax(raw logits) at the sampled token; NaN when no row asked for logprobs."""
    top_logprobs: tuple[torch.Tensor, torch.Tensor] | None
    """(values [N, K], token ids [N, K]) sorted by decreasing logprob, K = batch.num_top_logprobs; a row
    that asked for fewer than K should read only its first `logprobs` columns. None when no row asked."""


TopLogprobs = tuple[list[list[float]], list[list[int]]]
"""A step's top logprobs as lists: (values, token ids), one row per sampled sequence."""


@dataclass
class SampledTokens:
    """A step's sampled tokens as Python values, row i for the i-th sequence (`Sampler.sample_sequences`)."""

    token_ids: list[int]
    logprobs: list[float]
    top: TopLogprobs | None


class Sampler:
    """Samples next tokens from raw logits; stateless apart from the generator for unseeded rows."""

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator
        """Draws the noise of rows without their own generator; None uses torch's global RNG."""

    def __call__(self, logits: torch.Tensor, batch: SamplingBatch) -> SamplerOutput:
        """Sample one token per row of `logits` ([N, V] raw model logits), following the module's order."""
        _check_shape(logits, batch)
        if batch.all_greedy and not _needs_adjustment(batch):
            # The common greedy case: no copy of the [N, V] logits at all.
            token_ids = row_argmax(logits)
            logprobs, top_logprobs = _raw_logprobs(logits, token_ids, batch.num_top_logprobs)
            return SamplerOutput(token_ids=token_ids, logprobs=logprobs, top_logprobs=top_logprobs)
        adjusted = adjust_logits(logits, batch)
        if batch.all_greedy:
            token_ids = row_argmax(adjusted)
        else:
            greedy_ids = row_argmax(adjusted) if batch.any_greedy else None
            probs = _filtered_probs(adjusted, batch)
            token_ids = row_argmax(probs / self._exponential_noise(batch, probs))
            if greedy_ids is not None:
                token_ids = torch.where(batch.greedy, greedy_ids, token_ids)
        logprobs, top_logprobs = _raw_logprobs(logits, token_ids, batch.num_top_logprobs)
        return SamplerOutput(token_ids=token_ids, logprobs=logprobs, top_logprobs=top_logprobs)

    def sample_sequences(
        self,
        logits: torch.Tensor,
        seqs: Sequence[EngineSequence],
        logit_rows: list[int],
        grammars: StructuredOutputManager | None = None,
    ) -> SampledTokens:
        """The next token of each sequence from its row of `logits` (`logit_rows[i]` for `seqs[i]`: forked
        samples share their parent's row), under its request's parameters and its grammar's mask."""
        if logit_rows != list(range(logits.shape[0])):
            logits = logits[torch.tensor(logit_rows, device=logits.device)]
        if grammars is not None and any(seq.grammar is not None for seq in seqs):
            grammars.mask_logits(logits, [seq.grammar for seq in seqs])
        rows = [SamplingRow.of_sequence(seq) for seq in seqs]
        sampled = self(logits, SamplingBatch.build(rows, vocab_size=logits.shape[-1], device=logits.device))
        top = None
        if sampled.top_logprobs is not None:
            top = (sampled.top_logprobs[0].tolist(), sampled.top_logprobs[1].tolist())
        return SampledTokens(sampled.token_ids.tolist(), sampled.logprobs.tolist(), top)

    def probabilities(self, logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        """The distribution `__call__` samples from, float32 [N, V]; greedy rows are one-hot at their argmax.

        Speculative decoding needs it to accept or reject draft tokens.
        """
        _check_shape(logits, batch)
        adjusted = adjust_logits(logits, batch)
        if not batch.any_greedy:
            return _filtered_probs(adjusted, batch)
        one_hot = torch.zeros_like(adjusted).scatter_(1, row_argmax(adjusted)[:, None], 1.0)
        if batch.all_greedy:
            return one_hot
        return torch.where(batch.greedy[:, None], one_hot, _filtered_probs(adjusted, batch))

    def _exponential_noise(self, batch: SamplingBatch, like: torch.Tensor) -> torch.Tensor:
        """Exp(1) noise shaped like `like`: one batched draw, then each seeded row from its own generator."""
        if batch.shared_noise:
            noise = torch.empty_like(like).exponential_(generator=self.generator)
        else:
            noise = torch.ones_like(like)  # greedy rows' noise is never read
        # The only per-row loop: a generator yields one stream, so each seeded row draws on its own.
        for row, generator in batch.seeded:
            row_noise = torch.empty(like.shape[1], dtype=like.dtype, device=generator.device)
            noise[row] = row_noise.exponential_(generator=generator).to(like.device)
        # A zero draw would turn a masked token's 0/0 into NaN, which argmax would pick.
        return noise.clamp_(min=torch.finfo(like.dtype).tiny)


def greedy_argmax(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """The token `Sampler.__call__` picks for each greedy row: the argmax after stages 1-4 (logit_bias,
    min_tokens, penalties), which speculative verification must compare drafts with."""
    return row_argmax(adjust_logits(logits, batch) if _needs_adjustment(batch) else logits)


def _needs_adjustment(batch: SamplingBatch) -> bool:
    return (
        batch.logit_bias is not None
        or batch.suppressed is not None
        or batch.allowed is not None
        or batch.banned is not None
        or batch.output_ids is not None
    )


def _banned_next_tokens(words: Sequence[tuple[int, ...]], output: Sequence[int]) -> list[int]:
    """The last token of every bad word whose other tokens end `output` (a one-token word: always)."""
    banned = []
    for word in words:
        head = len(word) - 1
        if head == 0 or (len(output) >= head and tuple(output[len(output) - head :]) == word[:-1]):
            banned.append(word[-1])
    return banned


def adjust_logits(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """Stages 1-4 (logit_bias, min_tokens, allowed tokens and bad words, repetition, presence/frequency) on a
    float32 copy of `logits`."""
    x = logits.to(torch.float32, copy=True)
    if batch.logit_bias is not None:
        rows, ids, values = batch.logit_bias
        x.index_put_((rows, ids), values, accumulate=True)
    if batch.suppressed is not None:
        rows, ids = batch.suppressed
        x[rows, ids] = _NEG_INF
    if batch.allowed is not None:
        rows, mask = batch.allowed
        x[rows] = x[rows].masked_fill(~mask, _NEG_INF)
    if batch.banned is not None:
        rows, ids = batch.banned
        before = x[rows, ids]
        x[rows, ids] = _NEG_INF
        emptied = torch.isneginf(x.amax(dim=1))[rows]
        if bool(emptied.any()):
            x[rows[emptied], ids[emptied]] = before[emptied]
    if batch.output_ids is None:
        return x
    output_counts = _token_counts(batch.output_ids, batch.vocab_size)
    if batch.repetition_penalty is not None and batch.prompt_ids is not None:
        seen = (output_counts > 0) | (_token_counts(batch.prompt_ids, batch.vocab_size) > 0)
        penalty = batch.repetition_penalty[:, None]
        x = torch.where(seen, torch.where(x > 0, x / penalty, x * penalty), x)
    if batch.presence_penalty is not None and batch.frequency_penalty is not None:
        x -= batch.frequency_penalty[:, None] * output_counts
        x -= batch.presence_penalty[:, None] * (output_counts > 0)
    return x


def _filtered_probs(x: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """Stages 5-8 (temperature, top-k, top-p, min-p) then softmax; overwrites `x`, which the caller owns."""
    if batch.temperatures is not None:
        x.div_(batch.temperatures[:, None])
    if batch.top_p is not None:
        x = _top_k_top_p_by_sort(x, batch.top_k, batch.top_p)
    elif batch.top_k is not None:
        x = _top_k_by_topk(x, batch.top_k, batch.max_top_k, batch.vocab_size)
    if batch.log_min_p is not None:
        threshold = x.amax(dim=1, keepdim=True) + batch.log_min_p[:, None]
        x.masked_fill_(x < threshold, _NEG_INF)
    return torch.softmax(x, dim=1)


def _top_k_by_topk(x: torch.Tensor, top_k: torch.Tensor, max_top_k: int, vocab_size: int) -> torch.Tensor:
    """Top-k without a full sort: the k-th largest value of each row comes from one torch.topk(max_k)."""
    largest = x.topk(max_top_k, dim=1).values
    kth = largest.gather(1, (top_k.clamp(max=max_top_k) - 1)[:, None])
    kth = kth.masked_fill((top_k >= vocab_size)[:, None], _NEG_INF)
    return x.masked_fill_(x < kth, _NEG_INF)


def _top_k_top_p_by_sort(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor) -> torch.Tensor:
    """Top-k then top-p on one descending sort; top-p sees the distribution renormalised after top-k."""
    values, order = x.sort(dim=1, descending=True)
    if top_k is not None:
        kth = values.gather(1, (top_k - 1)[:, None])
        values.masked_fill_(values < kth, _NEG_INF)
    probs = values.softmax(dim=1)
    # Mass strictly before each token: keep it while that is below top_p, so the kept set is the
    # smallest one reaching top_p and always contains the most likely token.
    mass_before = probs.cumsum(dim=1) - probs
    values.masked_fill_(mass_before >= top_p[:, None], _NEG_INF)
    return torch.empty_like(x).scatter_(1, order, values)


def _raw_logprobs(
    logits: torch.Tensor, token_ids: torch.Tensor, num_top: int | None
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """Log-probs under the raw logits: the sampled token's, plus the top K when a row asked for them.

    When no row asked for logprobs (num_top is None) nothing is computed: a log-softmax over a large vocabulary
    costs as much as a sizeable share of a decode step. The sampled logprobs are then NaN.
    """
    if num_top is None:
        return torch.full(token_ids.shape, float("nan"), device=token_ids.device), None
    raw = logits.float()
    logp = torch.log_softmax(raw, dim=1)
    sampled = logp.gather(1, token_ids[:, None]).squeeze(1)
    values, ids = logp.topk(num_top, dim=1)
    return sampled, (values, ids)


def _token_counts(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[N, V] float32 occurrence counts of padded ids; the padding lands in a spare column that is dropped."""
    counts = torch.zeros(ids.shape[0], vocab_size + 1, dtype=torch.float32, device=ids.device)
    counts.scatter_add_(1, ids, torch.ones(ids.shape, dtype=torch.float32, device=ids.device))
    return counts[:, :vocab_size]


def _padded_ids(id_lists: list[Sequence[int]], pad: int, device: torch.device) -> torch.Tensor:
    """[N, L] long ids padded with `pad`, built from one flat tensor rather than one tensor per row."""
    lengths = torch.tensor([len(ids) for ids in id_lists], dtype=torch.long)
    width = int(lengths.max()) if id_lists else 0
    flat = torch.tensor(list(itertools.chain.from_iterable(id_lists)), dtype=torch.long)
    padded = torch.full((len(id_lists), width), pad, dtype=torch.long)
    padded[torch.arange(width) < lengths[:, None]] = flat
    return padded.to(device)


def _check_shape(logits: torch.Tensor, batch: SamplingBatch) -> None:
    if tuple(logits.shape) != (batch.num_rows, batch.vocab_size):
        raise ValueError(
            f"logits shape {tuple(logits.shape)} does not match the batch ({batch.num_rows}, {batch.vocab_size})"
        )
