"""Trains the bundled models' byte-level BPE tokenizer on the corpus and saves it as a HF tokenizer folder.

Byte-level BPE never meets an unknown character, so any user text round-trips. Digits are split one per token
(as Qwen2 and Llama 3 do): numbers are copied into tool arguments and JSON, and per-digit tokens make copying a
number the same skill for every number instead of thousands of memorised merges. `digits_per_token` 2 or 3
instead cuts numbers into fixed groups, every group a token: an option, not the recipe (in a 30-minute ablation
groups of 2 halved exact tool arguments, 0.27 -> 0.13, while selection and grounded answers rose).

A word must split into the same pieces with and without its leading space: a name or a value copied from a
sentence (" board game") into JSON (`"board game"`) is then the same pieces with the first one's bare form, which
the wired copy circuit matches (`induction_init.SpaceVariants`). Plain BPE learns the spaced and the bare
forms' merges separately (" board" -> " bo|ard", "board" -> "board"), and a copy that starts with "board"
finds no "board" in the prompt to continue from. `WordStarts.SPACE_LAST` (the recipe) learns every merge
inside words with the space split off, then appends one merge (space, first piece) for the commonest first
pieces; BPE applies merges lowest rank first, so the letters are merged before the space may join, and the
split is the same always. `WordStarts.MIRROR` (the earlier recipe) follows each merge (" A", B) with (A, B):
the same split for most names (35 of 132 held-out names split differently at a 4k vocab without it, 1-2 with
it), but not for common words that also occur bare, whose own merges fire first (26-34 of 300 held-out JSON
extraction conversations, by corpus, had a value split differently; 0 with space last, which also needs 0.5%
fewer tokens).

The control tokens (<|im_start|>, <|im_end|>, <|endoftext|>) are special: decoding with
skip_special_tokens drops them. The tool tags (<tool_call>, </tool_call>, <tool_response>, </tool_response>)
are single added tokens that are *not* special, so they survive decoding and a server's tool-call parser sees
them in the generated text.
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from switchyard_training.chat_format import (
    CHAT_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    SPECIAL_TOKENS,
    TAG_TOKENS,
    render_chat,
)
from switchyard_training.example import Example

DEFAULT_VOCAB_SIZE = 8192
# Words with their leading space, single digits, punctuation runs, newline runs, other whitespace.
_SPLIT_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# The same, but a word's leading space stays out of it: merges learned on these never touch a word's space.
_BARE_WORD_PATTERN = _SPLIT_PATTERN.replace(r"[^\r\n\p{L}\p{N}]?\p{L}+", r"[^\s\p{L}\p{N}]?\p{L}+")
_SPACE = "\u0120"


class WordStarts(StrEnum):
    """How a word's first piece is merged with its leading space (see the module docstring)."""

    SPACE_LAST = "space_last"
    """Merges inside words learned without the space, then (space, first piece) merges: a word splits the same
    with or without its space, always."""
    MIRROR = "mirror"
    """BPE as trained, each word-start merge mirrored without the space: the same split most of the time."""
    LEARNED = "learned"
    """BPE as trained."""


def corpus_texts(examples: Iterable[Example]) -> Iterable[str]:
    """The rendered conversations the tokenizer learns merges from (the template's own text included)."""
    for example in examples:
        yield render_chat(example.messages, example.tools).text


def _strip_added(text: str) -> str:
    # Added tokens are matched before BPE at encode time, so their text must not shape the merges.
    for token in (*SPECIAL_TOKENS, *TAG_TOKENS):
        text = text.replace(token, "\n")
    return text


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    min_frequency: int = 2,
    word_starts: WordStarts = WordStarts.SPACE_LAST,
    digits_per_token: int = 1,
) -> Tokenizer:
    """Train byte-level BPE with word starts merged as `word_starts` says; at most `vocab_size` entries, added
    tokens included.

    Special tokens take ids 0..2 (<|endoftext|>, <|im_start|>, <|im_end|>); the tool tags take the last ids.
    The mirror and digit groups add entries, so BPE is then retrained with a budget scaled until the total
    fits; space last splits its budget between word merges and word starts itself. A small corpus may yield
    fewer merges, hence fewer entries than asked for.

    `digits_per_token` > 1 cuts numbers into groups of that many digits from the left ("4520" -> "45|20",
    "401.4" -> "40|1|.|4") and gives every group its own token (110 entries for 2, 1110 for 3). Per-digit
    tokens leave a copying model a 10-symbol alphabet, where two tokens of context ("Ġ", "4") often match
    several numbers of the prompt ("401.4" and "414.7"); as groups the two numbers differ at their first token.
    """
    if vocab_size < 300:
        raise ValueError(f"vocab_size {vocab_size} is too small for byte-level BPE (256 bytes + merges)")
    if not 1 <= digits_per_token <= 3:
        raise ValueError(f"digits_per_token must be 1, 2 or 3, got {digits_per_token}")
    stripped = [_strip_added(t) for t in texts]
    budget = vocab_size - len(TAG_TOKENS)
    completions: list[Callable[[Tokenizer], Tokenizer]] = []
    if word_starts == WordStarts.MIRROR:
        completions.append(mirror_word_start_merges)
    if digits_per_token > 1:
        completions.append(partial(complete_digit_groups, digits=digits_per_token))
    train = _train_space_last_bpe if word_starts == WordStarts.SPACE_LAST else _train_bpe
    if completions:
        tokenizer = _train_completed_bpe(
            stripped, budget, min_frequency, digits_per_token, completions, train
        )
    else:
        tokenizer = train(stripped, budget, min_frequency, digits_per_token)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    return tokenizer


def _pre_tokenizer(pattern: str, digits_per_token: int) -> pre_tokenizers.PreTokenizer:
    if digits_per_token > 1:
        pattern = pattern.replace(r"|\p{N}|", rf"|\p{{N}}{{1,{digits_per_token}}}|")
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _train_bpe(
    texts: Sequence[str],
    vocab_size: int,
    min_frequency: int,
    digits_per_token: int = 1,
    pattern: str = _SPLIT_PATTERN,
) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = _pre_tokenizer(pattern, digits_per_token)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def _train_completed_bpe(
    texts: Sequence[str],
    budget: int,
    min_frequency: int,
    digits_per_token: int,
    completions: Sequence[Callable[[Tokenizer], Tokenizer]],
    train: Callable[[Sequence[str], int, int, int], Tokenizer] = _train_bpe,
) -> Tokenizer:
    """The largest BPE within `budget` entries after `completions` add theirs: the BPE budget is scaled by how
    much they overshot or left unused. What the completions add is not monotonic in the BPE size (a smaller BPE
    may lack digit pairs a larger one learned), so an overshoot always shrinks the BPE by at least its size."""
    floor = 300 - len(TAG_TOKENS)
    bpe_size, best = budget, None
    for _ in range(16):
        tokenizer = train(texts, bpe_size, min_frequency, digits_per_token)
        for complete in completions:
            tokenizer = complete(tokenizer)
        size = tokenizer.get_vocab_size()
        if size <= budget and (best is None or size > best.get_vocab_size()):
            best = tokenizer
        if budget - 8 <= size <= budget or (size > budget and bpe_size == floor):
            break
        scaled = int(bpe_size * budget / size)
        bpe_size = max(floor, min(scaled, bpe_size - (size - budget)) if size > budget else scaled)
    if best is None:
        raise ValueError(f"a vocabulary of {budget + len(TAG_TOKENS)} entries cannot hold the byte alphabet, "
                         "the mirrored merges and the digit groups; ask for a larger vocab_size")  # fmt: skip
    return best


SPACE_LAST_SHARES = (0.06, 0.1, 0.15, 0.2, 0.25, 0.3)
"""Shares of the budget tried for the word-start merges of `_train_space_last_bpe`."""


def _train_space_last_bpe(
    texts: Sequence[str], budget: int, min_frequency: int, digits_per_token: int
) -> Tokenizer:
    """BPE whose merges inside words are learned with the leading space split off, followed by one merge
    (space, first piece) for the commonest first pieces. Merges apply lowest rank first, so a word's letters are
    merged as they would be without the space before the space may join the first piece: " board" is
    "Ġbo ard" (or "Ġ bo ard") exactly when "board" is "bo ard". Of the shares of the budget in
    `SPACE_LAST_SHARES`, the one giving the fewest tokens on `texts` wins."""
    bare = _train_bpe(texts, budget, min_frequency, digits_per_token, pattern=_BARE_WORD_PATTERN)
    data, vocab, merges, _ = _bpe_parts(bare)
    splitter = _pre_tokenizer(_SPLIT_PATTERN, digits_per_token)
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
        counts.update(piece for piece, _ in splitter.pre_tokenize_str(text))
    base = [token for token, token_id in sorted(vocab.items(), key=lambda item: item[1])
            if token_id < len(vocab) - len(merges)]  # fmt: skip
    best: tuple[int, list[str], list[tuple[str, str]]] | None = None
    for share in SPACE_LAST_SHARES:
        starts = int(share * budget)
        kept = merges[: max(0, budget - len(base) - starts)]
        tokens = base + [a + b for a, b in kept]
        model = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=kept)
        first_pieces: collections.Counter[str] = collections.Counter()
        total = 0
        for piece, count in counts.items():
            spaced_word = len(piece) > 1 and piece[0] == _SPACE and piece[1].isalpha()
            pieces = [t.value for t in model.tokenize(piece[1:] if spaced_word else piece)]
            total += count * (len(pieces) + spaced_word)
            if spaced_word:
                first_pieces[pieces[0]] += count
        known = set(tokens)
        chosen = [(_SPACE, p) for p, c in first_pieces.most_common(starts)
                  if c >= min_frequency and _SPACE + p not in known]  # fmt: skip
        total -= sum(first_pieces[p] for _, p in chosen)
        if best is None or total < best[0]:
            best = (total, tokens + [a + b for a, b in chosen], kept + chosen)
    assert best is not None
    _, tokens, chosen_merges = best
    data["model"]["vocab"] = {token: token_id for token_id, token in enumerate(tokens)}
    data["model"]["merges"] = [list(pair) for pair in chosen_merges]
    tokenizer = Tokenizer.from_str(json.dumps(data))
    tokenizer.pre_tokenizer = splitter
    return tokenizer


def _bpe_parts(tokenizer: Tokenizer) -> tuple[dict[str, Any], dict[str, int], list[tuple[str, str]], int]:
    """A BPE tokenizer's JSON, its vocab (a live view into the JSON), its merges and the next free id."""
    data = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    next_id = 1 + max([*vocab.values(), *(t["id"] for t in data["added_tokens"])])
    return data, vocab, merges, next_id


def mirror_word_start_merges(tokenizer: Tokenizer, space: str = "\u0120") -> Tokenizer:
    """A copy of a BPE tokenizer (no added tokens beyond the specials) where each merge (" A", B) is followed
    by (A, B): the bare form of a word splits like the spaced one. New entries take ids after the last one."""
    data, vocab, merges, next_id = _bpe_parts(tokenizer)
    mirrored: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for left, right in merges:
        candidates = [(left, right)]
        if left.startswith(space) and len(left) > 1:
            candidates.append((left[len(space) :], right))
        for pair in candidates:
            if pair not in seen:
                seen.add(pair)
                mirrored.append(pair)
    for left, right in mirrored:
        if left + right not in vocab:
            vocab[left + right] = next_id
            next_id += 1
    data["model"]["merges"] = [list(pair) for pair in mirrored]
    return Tokenizer.from_str(json.dumps(data))


def complete_digit_groups(tokenizer: Tokenizer, digits: int) -> Tokenizer:
    """A copy of a BPE tokenizer with a merge for every digit string of 2..`digits` digits that lacks one,
    built left to right ("40" + "1" -> "401"), so every group the pre-tokenizer cuts is one token."""
    data, vocab, merges, next_id = _bpe_parts(tokenizer)
    produced = {left + right for left, right in merges}
    for group in (itertools.product("0123456789", repeat=n) for n in range(2, digits + 1)):
        for chars in group:
            token = "".join(chars)
            if token in produced:
                continue
            merges.append((token[:-1], token[-1]))
            produced.add(token)
            if token not in vocab:
                vocab[token] = next_id
                next_id += 1
    data["model"]["merges"] = [list(pair) for pair in merges]
    return Tokenizer.from_str(json.dumps(data))


def tokenizer_config(model_max_length: int) -> dict[str, object]:
    """tokenizer_config.json: the chat template and which tokens end a turn or pad a batch."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }


def save_tokenizer(tokenizer: Tokenizer, folder: str | Path, model_max_length: int = 2048) -> Path:
    """Write tokenizer.json and tokenizer_config.json so `AutoTokenizer.from_pretrained(folder)` loads it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = tokenizer_config(model_max_length)
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return folder


def load_tokenizer(folder: str | Path) -> Tokenizer:
    return Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
