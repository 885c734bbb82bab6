"""Trains the bundled models' byte-level BPE tokenizer on the corpus and saves it as a HF tokenizer folder.

Byte-level BPE never meets an unknown character, so any user text round-trips. Digits are split one per token
(as Qwen2 and Llama 3 do): numbers are copied into tool arguments and JSON, and per-digit tokens make copying a
number the same skill for every number instead of thousands of memorised merges.

The control tokens (<|im_start|>, <|im_end|>, <|endoftext|>) are special: decoding with
skip_special_tokens drops them. The tool tags (<tool_call>, </tool_call>, <tool_response>, </tool_response>)
are single added tokens that are *not* special, so they survive decoding and a server's tool-call parser sees
them in the generated text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from switchyard.bundled.chat_format import (
    CHAT_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    SPECIAL_TOKENS,
    TAG_TOKENS,
    render_chat,
)
from switchyard.bundled.example import Example

DEFAULT_VOCAB_SIZE = 8192
# Words with their leading space, single digits, punctuation runs, newline runs, other whitespace.
_SPLIT_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


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
    texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE, min_frequency: int = 2
) -> Tokenizer:
    """Train byte-level BPE; the result has at most `vocab_size` entries, added tokens included.

    Special tokens take ids 0..2 (<|endoftext|>, <|im_start|>, <|im_end|>); the tool tags take the last ids.
    A small corpus may yield fewer merges, hence fewer entries than asked for.
    """
    if vocab_size < 300:
        raise ValueError(f"vocab_size {vocab_size} is too small for byte-level BPE (256 bytes + merges)")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator((_strip_added(t) for t in texts), trainer=trainer)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    return tokenizer


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
