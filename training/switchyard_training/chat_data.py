"""Conversations from a JSONL file (OpenAI chat format), tokenized with a model's own chat template, with the
assistant's tokens marked: training data for a speculator on the traffic a model actually serves.

Each line is `{"messages": [...], "tools": [...]}` (tools optional). An assistant turn's tokens are what the
template adds between the conversation before it (with the generation prompt) and the conversation through
it. A template that rewrites earlier turns as later ones arrive (some drop past reasoning) breaks that prefix
relation; such a turn is left out of the loss, and so is a line that is not a conversation.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import transformers

from switchyard.errors import InvalidRequestError
from switchyard.models.tokenizer import render_chat
from switchyard_training.data import TokenizedExample

logger = logging.getLogger(__name__)


def conversation_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The file's conversations; malformed lines are skipped with a warning naming the line."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                logger.warning("%s:%d is not JSON (%s); skipped", path.name, number, exc)
                continue
            if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
                logger.warning("%s:%d has no messages list; skipped", path.name, number)
                continue
            yield record


def tokenize_conversation(
    tokenizer: transformers.PreTrainedTokenizerBase, record: dict[str, Any]
) -> TokenizedExample | None:
    """The whole conversation's tokens, the assistant turns' marked; None when nothing can be trained on."""
    messages, tools = record["messages"], record.get("tools")
    try:
        ids = render_chat(tokenizer, messages, tools=tools, add_generation_prompt=False)
        mask = [False] * len(ids)
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            before = render_chat(tokenizer, messages[:index], tools=tools, add_generation_prompt=True)
            through = render_chat(tokenizer, messages[: index + 1], tools=tools, add_generation_prompt=False)
            if ids[: len(through)] != through or through[: len(before)] != before:
                continue  # the template rewrites this turn later on: no clean span
            mask[len(before) : len(through)] = [True] * (len(through) - len(before))
    except (InvalidRequestError, TypeError, ValueError) as exc:
        logger.warning("conversation skipped: %s", exc)
        return None
    return TokenizedExample(ids=ids, loss_mask=mask) if any(mask) else None


def chat_examples(path: Path, tokenizer: transformers.PreTrainedTokenizerBase) -> Iterator[TokenizedExample]:
    for record in conversation_lines(path):
        example = tokenize_conversation(tokenizer, record)
        if example is not None:
            yield example
