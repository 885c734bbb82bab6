"""Turns corpus examples into packed training rows: token ids, per-example positions, assistant-only labels.

Loss is taken only on what the assistant writes (its content, tool calls and closing <|im_end|>): the prompt,
tool schemas and tool results are context the model reads, not text it should learn to produce.

Examples are packed whole into fixed-length rows (best-fit decreasing), never split across rows. Positions
restart at 0 for every example, which makes transformers' Llama build a block-diagonal causal mask (when
called with attention_mask=None): an example attends only to itself, exactly as at inference time.

Examples of one corpus group (conversations generated to share their prompt, such as one set of tool schemas)
are packed as a *shared-prefix group*: their common token prefix once, then each one's remainder, positioned
from the prefix's length on. Training on it needs the packed attention backend (`packed_attention`), under
which every remainder attends to the prefix and itself: the same computation as each conversation alone, with
the prefix's share of the work done once. On the tool conversations, whose schemas are most of their tokens,
that is most of the work.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from switchyard_training.chat_format import render_chat
from switchyard_training.example import Example

IGNORE_INDEX = -100
"""Label value transformers' causal-LM loss skips."""


@dataclass(frozen=True)
class TokenizedExample:
    ids: list[int]
    loss_mask: list[bool]
    """True where the token was written by the assistant."""
    group: int | None = None
    """Corpus group (`Example.group`): examples of one group are packed with their common prefix shared."""
    copy_starts: bool = True
    """Whether the copy starts of its replies teach the locator heads (`pointer_loss`)."""


def tokenize_examples(tokenizer: Tokenizer, examples: Sequence[Example]) -> list[TokenizedExample]:
    """Render and tokenize; a token is trained on when its characters lie inside an assistant span."""
    renders = [render_chat(e.messages, e.tools) for e in examples]
    encodings = tokenizer.encode_batch([r.text for r in renders], add_special_tokens=False)
    out = []
    for example, render, encoding in zip(examples, renders, encodings, strict=True):
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
        out.append(TokenizedExample(ids=list(encoding.ids), loss_mask=mask, group=example.group))
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
    num_shared_tokens: int = 0
    """Tokens the shared prefixes saved: what the groups' members would take alone, less what they take."""
    copy_start_mask: torch.Tensor | None = None
    """[rows, row_len] bool, False on the tokens of examples whose copy starts are not supervised; None when
    every example's are."""

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


MIN_SHARED_PREFIX = 16
"""Groups whose members share fewer tokens than this are packed as separate examples."""


@dataclass(frozen=True)
class PackUnit:
    """What goes into a row in one piece: a lone example, or a shared prefix and the remainders after it."""

    prefix: int
    """Tokens of members[0] stored once for all members (0 for a lone example)."""
    members: list[TokenizedExample]

    @property
    def length(self) -> int:
        return self.prefix + sum(len(m.ids) - self.prefix for m in self.members)


def shared_prefix_length(members: Sequence[TokenizedExample]) -> int:
    """Longest common token prefix of the members that leaves each a remainder starting with a prompt token.

    A remainder's first token is predicted, if at all, from the prefix's last token, which in the row sits in
    front of the first member only; so it must never be a trained (assistant) token."""
    shortest = min(len(m.ids) for m in members)
    length = 0
    while length < shortest - 1 and all(m.ids[length] == members[0].ids[length] for m in members):
        length += 1
    while length > 0 and any(m.loss_mask[length] for m in members):
        length -= 1
    return length


def pack_units(examples: Sequence[TokenizedExample], row_len: int) -> list[PackUnit]:
    """Lone examples and shared-prefix groups (split until each fits a row); examples over row_len are left
    out."""
    groups: dict[int, list[TokenizedExample]] = {}
    units: list[PackUnit] = []
    for example in examples:
        if len(example.ids) > row_len:
            continue
        if example.group is None:
            units.append(PackUnit(0, [example]))
        else:
            groups.setdefault(example.group, []).append(example)
    for members in groups.values():
        while members:
            prefix = shared_prefix_length(members) if len(members) > 1 else 0
            unit = PackUnit(prefix, members)
            if len(members) > 1 and prefix < MIN_SHARED_PREFIX:
                units.extend(PackUnit(0, [m]) for m in members)
                break
            taken = len(members)
            while unit.length > row_len:  # the first members that fit together (each fits alone)
                taken -= 1
                unit = PackUnit(shared_prefix_length(members[:taken]) if taken > 1 else 0, members[:taken])
            units.append(unit)
            members = members[taken:]
    return units


def pack_examples(examples: Sequence[TokenizedExample], row_len: int, pad_id: int) -> PackedRows:
    units = pack_units(examples, row_len)
    rows = assign_rows([unit.length for unit in units], row_len)
    input_ids = torch.full((len(rows), row_len), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), row_len), dtype=torch.long)
    labels = torch.full((len(rows), row_len), IGNORE_INDEX, dtype=torch.long)
    row_tokens = torch.zeros(len(rows), dtype=torch.long)
    any_left_out = not all(e.copy_starts for e in examples)
    copy_start_mask = torch.ones((len(rows), row_len), dtype=torch.bool) if any_left_out else None
    for r, indices in enumerate(rows):
        cursor = 0
        for index in indices:
            unit = units[index]
            for number, member in enumerate(unit.members):
                first = 0 if number == 0 else unit.prefix  # the first member lays down the prefix
                n = len(member.ids) - first
                ids = torch.tensor(member.ids[first:], dtype=torch.long)
                input_ids[r, cursor : cursor + n] = ids
                position_ids[r, cursor : cursor + n] = torch.arange(first, first + n)
                mask = torch.tensor(member.loss_mask[first:])
                labels[r, cursor : cursor + n] = torch.where(mask, ids, IGNORE_INDEX)
                if copy_start_mask is not None and not member.copy_starts:
                    copy_start_mask[r, cursor : cursor + n] = False
                cursor += n
        row_tokens[r] = cursor
        # Padding forms its own "example" (positions from 0), so no real token attends to it.
        position_ids[r, cursor:] = torch.arange(row_len - cursor)
    kept = [m for unit in units for m in unit.members]
    return PackedRows(
        input_ids=input_ids,
        position_ids=position_ids,
        labels=labels,
        row_tokens=row_tokens,
        num_examples=len(kept),
        num_dropped=len(examples) - len(kept),
        num_shared_tokens=sum(len(m.ids) for m in kept) - sum(unit.length for unit in units),
        copy_start_mask=copy_start_mask,
    )
