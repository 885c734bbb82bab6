"""Builds a small trained byte-level BPE tokenizer in a folder, the way tests get tokenizers without a hub.

The vocabulary is kept small (default 320, the tiny test models' vocab size) so token ids always fit a test
model's embedding table. Training text mixes English, accented Latin, CJK and emoji so that some merges span
multi-byte characters and others split them, which is what streaming detokenization must cope with.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Special tokens; training gives them ids 0, 1 and 2 in this order."""

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

TOOL_TAGS: tuple[str, ...] = ("<tool_call>", "</tool_call>")
"""Added (non-special) tokens, as in Qwen2.5: one token each, and still part of the decoded text."""

# ChatML with Hermes/Qwen2.5-style tools: the tools' JSON schemas go in a system block, a call is
# `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>` and a tool result is a `tool` message.
CHAT_TEMPLATE = (
    # transformers renders with trim_blocks, which eats a newline right after a block tag, so newlines that
    # follow a tag are written as {{ '\\n' }}.
    "{% if tools %}<|im_start|>system{{ '\\n' }}<tools>{{ '\\n' }}"
    "{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor %}"
    "</tools><|im_end|>{{ '\\n' }}{% endif %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}"
    "{% if message['role'] == 'tool' and message['tool_call_id'] %} {{ message['tool_call_id'] }}{% endif %}"
    "{{ '\\n' }}{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% if message['tool_calls'] %}{% for call in message['tool_calls'] %}"
    "{% if message['content'] or not loop.first %}{{ '\\n' }}{% endif %}"
    "{% set function = call['function'] if call['function'] is defined else call %}"
    '<tool_call>{{ \'\\n\' }}{"name": "{{ function[\'name\'] }}", "arguments": '
    "{% if function['arguments'] is string %}{{ function['arguments'] }}"
    "{% else %}{{ function['arguments'] | tojson }}{% endif %}}{{ '\\n' }}</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)

TRAINING_TEXT: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog. Hello, world! How are you today?",
    "Switchyard serves language models: it schedules, batches and streams tokens to the user.",
    "def main() -> None:\n    print('hello world')\n    return None\n",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "Café crème, naïve façade, résumé, jalapeño, Ærøskøbing, straße, Łódź.",
    "日本語のテキストです。中文文本。한국어 텍스트.",
    "Emoji: 😀 🎉 🚀 👍🏽 👨‍👩‍👧 ❤️ — and math: ∑ ∫ ≤ ≥ π.",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>",
)


def build_tokenizer(folder: Path, vocab_size: int = 320) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer of `vocab_size` tokens, save it to `folder` and return it.

    Saves tokenizer.json and tokenizer_config.json (chat template, eos "<|im_end|>", pad "<|endoftext|>").
    `vocab_size` must leave room for the 256 byte tokens and the 3 special tokens.
    """
    minimum = 256 + len(SPECIAL_TOKENS) + len(TOOL_TAGS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be >= {minimum} (256 bytes + special tokens), got {vocab_size}")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TAGS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(TRAINING_TEXT) * 4, trainer=trainer)
    backend.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TOOL_TAGS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        extra_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    folder.mkdir(parents=True, exist_ok=True)
    # Keep the template inside tokenizer_config.json (as many published models do) rather than a .jinja file.
    tokenizer.save_pretrained(folder, save_jinja_files=False)
    return tokenizer
