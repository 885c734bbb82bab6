"""Reasoning ("thinking") output: what a model writes inside <think>...</think> is its reasoning, the rest its answer.

Qwen3, QwQ and the DeepSeek-R1 family all use these tags. Where the reasoning opens differs: a Qwen3 reply
starts with "<think>" itself, while DeepSeek-R1's and Qwen3-Thinking-2507's chat templates end the prompt with
"<think>\\n", so the reply begins inside the reasoning and shows only "</think>". So whether a reply starts in
reasoning is read from the rendered prompt's end (`prompt_opens_reasoning`), not fixed per parser name, and the
one splitter serves every name vLLM's `--reasoning-parser` takes for these models.

A reply that starts outside reasoning and does not open with "<think>" is all answer (Qwen3 with
`enable_thinking: false`, whose template writes an empty think block into the prompt). A reasoning block left
open (the reply cut by max_tokens) is all reasoning. Streaming holds back at most a tag's length of text, so a
tag split across two deltas is never shown as text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
REASONING_PARSERS = ("think", "qwen3", "deepseek_r1")
"""Accepted `--reasoning-parser` names: vLLM's for these model families, and the convention's own name."""


def check_reasoning_parser(name: str) -> str:
    """`name` when it is a known parser; ValueError naming the known ones otherwise."""
    if name not in REASONING_PARSERS:
        raise ValueError(f"unknown reasoning parser {name!r}; known: {', '.join(REASONING_PARSERS)}")
    return name


def prompt_opens_reasoning(prompt_tail: str) -> bool:
    """Whether a prompt ending in `prompt_tail` leaves a <think> block open for the reply to continue."""
    return prompt_tail.rfind(THINK_OPEN) > prompt_tail.rfind(THINK_CLOSE)


def prompt_closes_reasoning(prompt_tail: str) -> bool:
    """Whether the prompt ends right after a closed block: the template turned reasoning off (Qwen3's
    `enable_thinking: false` writes an empty one), so the reply will not reason."""
    return prompt_tail.rstrip().endswith(THINK_CLOSE)


class _Phase(Enum):
    START = "start"
    """Nothing decided yet: the reply may still open with <think>."""
    REASONING = "reasoning"
    ANSWER = "answer"


@dataclass
class ReasoningPiece:
    text: str
    reasoning: bool


@dataclass
class ReasoningSplitter:
    """Splits a reply into reasoning and answer as its text arrives (`feed`), and at its end (`finish`)."""

    opened: bool = False
    """The prompt left a <think> block open (`prompt_opens_reasoning`)."""
    _phase: _Phase = field(init=False)
    _held: str = field(init=False, default="")
    _section_start: bool = field(init=False, default=True)
    """No text of the current section shown yet: its leading whitespace is dropped ("<think>\\n", "</think>\\n\\n")."""

    def __post_init__(self) -> None:
        self._phase = _Phase.REASONING if self.opened else _Phase.START

    def feed(self, text: str) -> list[ReasoningPiece]:
        self._held += text
        pieces: list[ReasoningPiece] = []
        while True:
            if self._phase is _Phase.START:
                stripped = self._held.lstrip()
                if stripped.startswith(THINK_OPEN):
                    self._held = stripped[len(THINK_OPEN) :]
                    self._enter(_Phase.REASONING)
                    continue
                if THINK_OPEN.startswith(stripped):  # "", "<", "<th", ...: not decided yet
                    return pieces
                self._phase = _Phase.ANSWER  # an answer from the start keeps its text as written
                self._section_start = False
                continue
            if self._phase is _Phase.REASONING:
                end = self._held.find(THINK_CLOSE)
                if end >= 0:
                    self._emit(pieces, self._held[:end], reasoning=True)
                    self._held = self._held[end + len(THINK_CLOSE) :]
                    self._enter(_Phase.ANSWER)
                    continue
                keep = _partial_tag_length(self._held, THINK_CLOSE)
                self._emit(pieces, self._held[: len(self._held) - keep], reasoning=True)
                self._held = self._held[len(self._held) - keep :]
                return pieces
            self._emit(pieces, self._held, reasoning=False)
            self._held = ""
            return pieces

    def finish(self) -> list[ReasoningPiece]:
        """What is still held when the reply ends: a partial tag is text after all."""
        pieces: list[ReasoningPiece] = []
        held, self._held = self._held, ""
        if self._phase is _Phase.START:
            self._phase, self._section_start = _Phase.ANSWER, False
        self._emit(pieces, held, reasoning=self._phase is _Phase.REASONING)
        return pieces

    def _enter(self, phase: _Phase) -> None:
        self._phase, self._section_start = phase, True

    def _emit(self, pieces: list[ReasoningPiece], text: str, reasoning: bool) -> None:
        if self._section_start:
            text = text.lstrip()
            if not text:
                return
            self._section_start = False
        if not text:
            return
        if pieces and pieces[-1].reasoning == reasoning:
            pieces[-1].text += text
        else:
            pieces.append(ReasoningPiece(text, reasoning))


@dataclass(frozen=True)
class SplitReply:
    reasoning: str | None
    """None when the reply has no reasoning."""
    answer: str


def split_reasoning(text: str, opened: bool = False) -> SplitReply:
    """A whole reply's reasoning and answer; the same split a stream of it gets, piece by piece."""
    splitter = ReasoningSplitter(opened)
    pieces = splitter.feed(text) + splitter.finish()
    reasoning = "".join(p.text for p in pieces if p.reasoning)
    answer = "".join(p.text for p in pieces if not p.reasoning)
    has_reasoning = any(p.reasoning for p in pieces) or opened or text.lstrip().startswith(THINK_OPEN)
    return SplitReply(reasoning if has_reasoning else None, answer)


def reasoning_token_count(
    token_ids: Sequence[int], decode: Callable[[Sequence[int]], str], opened: bool = False
) -> int:
    """Output tokens spent on reasoning (OpenAI's `completion_tokens_details.reasoning_tokens`): up to and
    including the one that completes "</think>", all of them while the block never closes, 0 for a reply that
    does not reason. `decode` must keep special tokens, so tags show whatever the tokenizer calls them."""
    if not token_ids:
        return 0
    whole = decode(token_ids)
    if not (opened or whole.lstrip().startswith(THINK_OPEN)):
        return 0
    if THINK_CLOSE not in whole:
        return len(token_ids)
    low, high = 1, len(token_ids)  # the shortest prefix whose text holds the closing tag
    while low < high:
        middle = (low + high) // 2
        if THINK_CLOSE in decode(token_ids[:middle]):
            high = middle
        else:
            low = middle + 1
    return low


def _partial_tag_length(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `tag` (text to hold back)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0
