"""Copy drills that make every word piece of the vocabulary a reply token somewhere in the corpus.

A byte-level BPE vocabulary holds pieces its own training text almost never emits: intermediate merges that
later merges swallow ("tics" inside a word the corpus always writes whole) and pieces of one-off words. Such a
piece is never a training target, so the softmax only ever pushes its logit down, and the model cannot write it
even when copying: run 20's main model, teacher-forced through "Pimrudrud Analy", gave "tics" p = 0.001 and " ["
0.94, so every held-out "... Analytics" company broke mid-name (grounded right 0.09 for those, 0.42-0.56 for the
other suffixes); held-out products such as "office chair" or "blender" were never written either. Of 4095
pieces, 911 occurred nowhere in 6000 training conversations.

After the tokenizer is trained, `starved_pieces` counts how often each piece with a letter or digit is a reply
token in the tokenized corpus, and `vocabulary_drills` writes echo and list drills whose words are built around
the pieces seen fewer than `min_count` times, each word checked to tokenize into a split holding its piece,
until every such piece is a reply token `min_count` times.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from switchyard_training.chat_format import SPECIAL_TOKENS, TAG_TOKENS
from switchyard_training.data import TokenizedExample
from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.context import Conversation

_ECHO_LEADS = ("Say exactly this: ", "Repeat after me: ", "Echo: ", "Copy this exactly:\n", "Please repeat: ")
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")


@dataclass(frozen=True)
class DrillPlan:
    """What the drills must cover: piece id -> how many more reply occurrences it needs."""

    needed: dict[int, int]


def reply_counts(tokenized: Sequence[TokenizedExample], vocab_size: int) -> list[int]:
    """How often each id is a reply (trained) token."""
    trained = [t for e in tokenized for t, m in zip(e.ids, e.loss_mask, strict=True) if m]
    return torch.bincount(torch.tensor(trained, dtype=torch.long), minlength=vocab_size).tolist()


def _word_piece(tokenizer: Tokenizer, token_id: int) -> str | None:
    """The piece's text as it is written inside a word (leading space dropped), or None for pieces no word
    holds (control tokens, punctuation, whitespace, broken UTF-8)."""
    text = tokenizer.decode([token_id])
    word = text.lstrip(" ")
    if not word or "\ufffd" in word or not word.isalnum() or not word.isascii():
        return None
    return word


def starved_pieces(tokenizer: Tokenizer, counts: Sequence[int], min_count: int) -> DrillPlan:
    """The word pieces that are reply tokens fewer than `min_count` times, with how many more each needs."""
    control = {tokenizer.token_to_id(t) for t in (*SPECIAL_TOKENS, *TAG_TOKENS)}
    needed = {}
    for token_id in range(tokenizer.get_vocab_size()):
        if token_id in control or counts[token_id] >= min_count:
            continue
        if _word_piece(tokenizer, token_id) is not None:
            needed[token_id] = min_count - counts[token_id]
    return DrillPlan(needed)


class _WordMaker:
    """Words that tokenize into a split holding a given piece, with other pieces around it for variety."""

    def __init__(self, tokenizer: Tokenizer, rng: random.Random) -> None:
        self.tokenizer, self.rng = tokenizer, rng
        self.fillers = [
            w for i in range(tokenizer.get_vocab_size())
            if (w := _word_piece(tokenizer, i)) is not None and w.isalpha() and 2 <= len(w) <= 4
        ]  # fmt: skip

    def word(self, token_id: int) -> str | None:
        """A word whose spaced form (as it stands after a space in a list) tokenizes to pieces holding
        `token_id`, or None when no try does."""
        piece = _word_piece(self.tokenizer, token_id)
        if piece is None:
            return None
        spaced = self.tokenizer.decode([token_id]).startswith(" ")
        for attempt in range(8):
            prefix = (
                "" if spaced or attempt >= 6 or self.rng.random() < 0.4 else self.rng.choice(self.fillers)
            )
            suffix = "" if attempt >= 6 or self.rng.random() < 0.4 else self.rng.choice(self.fillers).lower()
            word = prefix + piece + suffix
            if self.rng.random() < 0.3 and word[0].islower():
                word = word[0].upper() + word[1:]
            if token_id in self.tokenizer.encode(" " + word, add_special_tokens=False).ids:
                return word
        return None


def _drill(rng: random.Random, words: list[str]) -> Example:
    conv = Conversation()
    listed = rng.choice((" ", ", ", " and ")).join(words)
    if len(words) > 1 and rng.random() < 0.3:
        index = rng.randrange(len(words))
        conv.user(f"List: {', '.join(words)}\nWhat is the {_ORDINALS[index]} item?")
        conv.assistant(words[index], {"kind": CheckKind.FACT, "answer": words[index]})
    else:
        conv.user(rng.choice(_ECHO_LEADS) + listed)
        conv.assistant(listed, {"kind": CheckKind.FACT, "answer": listed})
    return conv.example(Category.COPY)


def vocabulary_drills(tokenizer: Tokenizer, plan: DrillPlan, seed: int, max_words: int = 6) -> list[Example]:
    """Drills until each planned piece has been a reply token as often as `plan` asks, counted on the reply as
    tokenized (a list item's reply holds one of the words). Pieces no word can hold are skipped; a bounded
    number of drills, so unlucky splits cannot keep it going."""
    rng = random.Random(seed)
    maker = _WordMaker(tokenizer, rng)
    remaining = {t: n for t, n in plan.needed.items() if maker.word(t) is not None}
    drills: list[Example] = []
    for _ in range(2 * sum(remaining.values())):
        if not remaining:
            break
        chosen = rng.sample(list(remaining), min(len(remaining), rng.randint(1, max_words)))
        words = [w for t in chosen if (w := maker.word(t)) is not None]
        if not words:
            continue
        drills.append(_drill(rng, words))
        reply_ids = set(tokenizer.encode(drills[-1].messages[-1]["content"], add_special_tokens=False).ids)
        for token_id in chosen:
            if token_id in reply_ids:
                remaining[token_id] -= 1
        remaining = {t: n for t, n in remaining.items() if n > 0}
    return drills
