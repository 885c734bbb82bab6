"""Teach the main model's locator heads where a copy starts, by supervising their attention.

A grounded reply opens with the asked company's name, a JSON value or a tool argument with the first piece of a
span found somewhere in the prompt. The wired induction head continues a copy once it has started, but it has
nothing to match at the start: at the reply's first token it reads the "\\n" after "assistant" and attends to
whatever follows similar line ends, which in a grounded prompt is a passage line's company, blind to the
question (run 15, attention of layer 1's wired head at the reply start: 0.45 of it on the asked company's
first piece, 0.29 on the other companies'). Finding the start is what the locator heads (`InductionInit.locator_layers`:
copy-valued heads with learned attention) are for, and the language-model loss teaches them slowly: it reaches
a locator's query and key only through the logit of the one token it copies.

The corpus knows where each copy comes from, so this loss says it directly. A *copy start* is a reply token
whose next token too continues a span of the conversation before it (two tokens, compared through
`canonical` ids so a spaced piece matches its bare form), while the token before it does not (the induction
head already continues such spans). The query that predicts it should attend to where the span starts earlier,
at the places whose tokens go on to match the reply's the longest (two "founded in 19.." passages share the
pair "1 9"; the copy comes from the one with the whole year); the loss is the negative log of the attention mass one query head of each supervised layer puts there, among the
keys that query sees. Nothing changes at inference: the heads only learn sooner where to look.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from switchyard.models.rope import apply_rotary, sign_folded
from switchyard_training.data import IGNORE_INDEX
from switchyard_training.packed_attention import packed_segments


@dataclass(frozen=True)
class PointerTargets:
    """Supervised queries of one batch: row, query column, the keys it sees and the copy's sources."""

    rows: torch.Tensor
    queries: torch.Tensor
    visible: torch.Tensor
    """[n, row_len] bool."""
    sources: torch.Tensor
    """[n, row_len] bool, a subset of `visible`."""

    @property
    def count(self) -> int:
        return int(self.rows.numel())


@dataclass(frozen=True)
class PointerSupervision:
    """Which heads learn copy starts, how strongly, and how tokens compare."""

    layers: tuple[int, ...]
    head: int
    """Query head (in each of `layers`) whose attention is supervised: one of the locator group, so the head
    that learns where a copy starts is one whose value and output already copy."""
    weight: float
    canonical: torch.Tensor
    """Token id -> the id it is compared as (spaced pieces as their bare form)."""
    excluded: frozenset[int] = frozenset()
    """Tokens never supervised as a copy start (chat control and tag tokens)."""
    max_sources: int = 8
    """Spans found more often than this are boilerplate (schema keys, punctuation), not a lookup."""
    continuations: bool = False
    """Also supervise contested continuations: a reply token the induction head could continue to, but whose
    two tokens of context precede other tokens too (after "Acme" the company's every passage goes on), toward
    the earlier place whose continuation matches the reply longest (the passage with the asked attribute). Not in
    the recipe: run 16's main model fine-tuned 150 steps with it chose the right continuation after the company
    less often than fine-tuned without it (quotes 138 against 154 of 208, "not found" 20 against 34 of 92)."""

    @classmethod
    def for_vocab(
        cls,
        layers: tuple[int, ...],
        head: int,
        weight: float,
        vocab_size: int,
        space_pairs: list[tuple[int, int]],
        excluded: frozenset[int] = frozenset(),
        continuations: bool = False,
    ) -> PointerSupervision:
        canonical = torch.arange(vocab_size)
        for spaced, bare in space_pairs:
            canonical[spaced] = bare
        return cls(layers, head, weight, canonical, excluded, continuations=continuations)

    def targets(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, labels: torch.Tensor
    ) -> PointerTargets:
        """Supervised reply tokens of a batch of packed rows, segmented as `packed_attention` attends
        (shared-prefix continuations see their group's prefix)."""
        length = input_ids.shape[1]
        canon = self.canonical[input_ids].tolist()
        assistant = (labels != IGNORE_INDEX).tolist()
        segments = packed_segments(position_ids)
        rows: list[int] = []
        queries: list[int] = []
        visible_sets: list[list[int]] = []
        source_sets: list[list[int]] = []
        root = 0
        starts = itertools.accumulate(segments.lengths[:-1], initial=0)
        for flat_start, size, prefix in zip(starts, segments.lengths, segments.prefixes, strict=True):
            row, start = divmod(flat_start, length)
            if prefix == 0:
                root = start
            conversation = list(range(root, root + prefix)) + list(range(start, start + size))
            for query, visible, sources in self._conversation_targets(
                canon[row], assistant[row], conversation
            ):
                rows.append(row)
                queries.append(query)
                visible_sets.append(visible)
                source_sets.append(sources)
        visible_mask = torch.zeros(len(rows), length, dtype=torch.bool)
        source_mask = torch.zeros(len(rows), length, dtype=torch.bool)
        for index, (visible, sources) in enumerate(zip(visible_sets, source_sets, strict=True)):
            visible_mask[index, visible] = True
            source_mask[index, sources] = True
        return PointerTargets(torch.tensor(rows, dtype=torch.long), torch.tensor(queries, dtype=torch.long),
                              visible_mask, source_mask)  # fmt: skip

    def _conversation_targets(
        self, tokens: list[int], replies: list[bool], conversation: list[int]
    ) -> Iterator[tuple[int, list[int], list[int]]]:
        """(query column, visible columns, source columns) for each supervised reply token of one conversation,
        given as the row columns it reads in order."""
        seen: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
        for k in range(1, len(conversation) - 1):
            if k >= 2:  # bigrams wholly before the query at k - 1
                seen[(tokens[conversation[k - 2]], tokens[conversation[k - 1]])].append(k - 2)
            here, after = conversation[k], conversation[k + 1]
            if not (replies[here] and replies[after]) or tokens[here] in self.excluded:
                continue
            found = seen.get((tokens[here], tokens[after]))
            if not found or len(found) > self.max_sources:
                continue
            # a span the induction head continues is supervised only where its two tokens of context also lead
            # elsewhere (a company's other passages)
            continued = (tokens[conversation[k - 1]], tokens[here]) in seen
            if continued and not (self.continuations and self._contested(tokens, conversation, seen, k)):
                continue
            found = self._longest(tokens, conversation, found, k)
            yield conversation[k - 1], conversation[:k], [conversation[m] for m in found]

    @staticmethod
    def _contested(
        tokens: list[int], conversation: list[int], seen: dict[tuple[int, int], list[int]], k: int
    ) -> bool:
        """Whether a place that the two tokens before k also precede continues with another token."""
        if k < 2:
            return False
        context = seen.get((tokens[conversation[k - 2]], tokens[conversation[k - 1]]), [])
        here = tokens[conversation[k]]
        return any(tokens[conversation[p + 2]] != here for p in context if p + 2 < k)

    @staticmethod
    def _longest(
        tokens: list[int], conversation: list[int], found: list[int], k: int, cap: int = 16
    ) -> list[int]:
        """The sources whose following tokens match the reply's for longest (up to `cap`)."""

        def length(m: int) -> int:
            run = 0
            while (
                run < cap
                and m + run < k
                and k + run < len(conversation)
                and (tokens[conversation[m + run]] == tokens[conversation[k + run]])
            ):
                run += 1
            return run

        lengths = [length(m) for m in found]
        best = max(lengths)
        return [m for m, run in zip(found, lengths, strict=True) if run == best]

    @contextmanager
    def capture(self, model: Any) -> Iterator[dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]]]:
        """While open, each supervised layer's attention input (normed hidden states, RoPE cos/sin) of the
        forward passes run inside it, keyed by layer."""
        captured: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = {}

        def hook(layer: int) -> Any:
            def keep(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                captured[layer] = (kwargs["hidden_states"], kwargs["position_embeddings"])

            return keep

        handles = [
            model.model.layers[layer].self_attn.register_forward_pre_hook(hook(layer), with_kwargs=True)
            for layer in self.layers
        ]
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()

    def loss(
        self,
        model: Any,
        captured: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]],
        targets: PointerTargets,
    ) -> torch.Tensor:
        """Mean over supervised layers and queries of -log(attention mass on the sources)."""
        if targets.count == 0:
            return torch.zeros((), device=model.lm_head.weight.device)
        config = model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        group = config.num_attention_heads // config.num_key_value_heads
        kv = self.head // group
        losses = []
        for layer in self.layers:
            hidden, (cos, sin) = captured[layer]
            sin = sign_folded(sin)  # transformers' table, in the form apply_rotary takes
            attn = model.model.layers[layer].self_attn
            query_weight = attn.q_proj.weight[self.head * head_dim : (self.head + 1) * head_dim]
            key_weight = attn.k_proj.weight[kv * head_dim : (kv + 1) * head_dim]
            rows, columns = targets.rows, targets.queries
            query = torch.nn.functional.linear(hidden[rows, columns], query_weight)
            query = apply_rotary(
                query, cos[rows, columns].to(query.dtype), sin[rows, columns].to(query.dtype)
            )
            keys = torch.nn.functional.linear(hidden, key_weight)  # [batch, tokens, dim]
            keys = apply_rotary(keys, cos.to(keys.dtype), sin.to(keys.dtype))
            # every query against every row's keys is a small product; keep each query's own row
            scores = (query.float() @ keys.flatten(0, 1).float().T).view(len(rows), *keys.shape[:2])
            scores = scores[torch.arange(len(rows)), rows] * attn.scaling
            scores = scores.masked_fill(~targets.visible, float("-inf"))
            on_sources = scores.masked_fill(~targets.sources, float("-inf"))
            losses.append((scores.logsumexp(-1) - on_sources.logsumexp(-1)).mean())
        return torch.stack(losses).mean()
