"""Turns corpus examples into packed training rows: token ids, per-example positions, assistant-only labels.

Loss is taken only on what the assistant writes (its content, tool calls and closing <|im_end|>): the prompt,
tool schemas and tool results are context the model reads, not text it should learn to produce.

Examples are packed whole into fixed-length rows (best-fit decreasing), never split across rows. Positions
restart at 0 for every example, which makes transformers' Llama build a block-diagonal causal mask (when
called with attention_mask=None): an example attends only to itself, exactly as at inference time.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from switchyard.bundled.chat_format import render_chat
from switchyard.bundled.example import Example

IGNORE_INDEX = -100
"""Label value transformers' causal-LM loss skips."""


@dataclass(frozen=True)
class TokenizedExample:
    ids: list[int]
    loss_mask: list[bool]
    """True where the token was written by the assistant."""


def tokenize_examples(tokenizer: Tokenizer, examples: Sequence[Example]) -> list[TokenizedExample]:
    """Render and tokenize; a token is trained on when its characters lie inside an assistant span."""
    renders = [render_chat(e.messages, e.tools) for e in examples]
    encodings = tokenizer.encode_batch([r.text for r in renders], add_special_tokens=False)
    out = []
    for render, encoding in zip(renders, encodings, strict=True):
        mask = [False] * len(encoding.ids)
        spans = iter(render.assistant_spans)
        span = next(spans, None)
        for index, (start, end) in enumerate(encoding.offsets):
            while span is not None and start >= span[1]:
                span = next(spans, None)
            if span is not None and start >= span[0]:
                if end > span[1]:
                    raise ValueError(f"token {index} straddles the end of an assistant span {span}")
                mask[index] = True
        out.append(TokenizedExample(ids=list(encoding.ids), loss_mask=mask))
    return out


@dataclass(frozen=True)
class PackedRows:
    """Fixed-length rows ready to batch: `labels` is IGNORE_INDEX outside assistant tokens and padding."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    labels: torch.Tensor
    row_tokens: torch.Tensor
    """[rows] tokens of real examples in each row (the rest is padding)."""
    num_examples: int
    num_dropped: int
    """Examples longer than a row, left out."""

    @property
    def num_rows(self) -> int:
        return self.input_ids.shape[0]

    @property
    def num_loss_tokens(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())


def assign_rows(lengths: Sequence[int], row_len: int) -> list[list[int]]:
    """Best-fit decreasing bin packing: lists of example indices whose lengths sum to at most row_len."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (space left, row index), kept sorted
    for index in order:
        length = lengths[index]
        pos = bisect.bisect_left(free, (length, -1))
        if pos == len(free):
            rows.append([index])
            bisect.insort(free, (row_len - length, len(rows) - 1))
        else:
            space, row = free.pop(pos)
            rows[row].append(index)
            bisect.insort(free, (space - length, row))
    return rows


def pack_examples(examples: Sequence[TokenizedExample], row_len: int, pad_id: int) -> PackedRows:
    kept = [e for e in examples if len(e.ids) <= row_len]
    rows = assign_rows([len(e.ids) for e in kept], row_len)
    input_ids = torch.full((len(rows), row_len), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), row_len), dtype=torch.long)
    labels = torch.full((len(rows), row_len), IGNORE_INDEX, dtype=torch.long)
    row_tokens = torch.zeros(len(rows), dtype=torch.long)
    for r, members in enumerate(rows):
        cursor = 0
        for index in members:
            example = kept[index]
            n = len(example.ids)
            ids = torch.tensor(example.ids, dtype=torch.long)
            input_ids[r, cursor : cursor + n] = ids
            position_ids[r, cursor : cursor + n] = torch.arange(n)
            labels[r, cursor : cursor + n] = torch.where(torch.tensor(example.loss_mask), ids, IGNORE_INDEX)
            cursor += n
        row_tokens[r] = cursor
        # Padding forms its own "example" (positions from 0), so no real token attends to it.
        position_ids[r, cursor:] = torch.arange(row_len - cursor)
    return PackedRows(
        input_ids=input_ids,
        position_ids=position_ids,
        labels=labels,
        row_tokens=row_tokens,
        num_examples=len(kept),
        num_dropped=len(examples) - len(kept),
    )
