"""Splits documents into passages for retrieval: by headings, then paragraphs, with overlap.

Why this shape: a passage under one heading reads on its own (the heading path is kept with it), paragraphs
are natural units of meaning, and overlapping the last paragraph keeps an answer that straddles two chunks
retrievable from either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from switchyard.agents.rag.loaders import LoadedDocument

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class ChunkingConfig:
    max_chars: int = 1000
    """Soft upper bound of a passage's length; longer paragraphs are split at sentences."""
    overlap_chars: int = 200
    """Up to this much of a passage's tail (whole paragraphs or sentences) starts the next one."""


@dataclass(frozen=True)
class Chunk:
    text: str
    heading: str
    """Heading path, e.g. "Install > Linux" ("" before any heading)."""
    page: int | None
    position: int
    """Index of the chunk within its document, from 0."""


def chunk_document(document: LoadedDocument, config: ChunkingConfig | None = None) -> list[Chunk]:
    """Chunks of `document` in reading order."""
    config = config or ChunkingConfig()
    chunks: list[Chunk] = []
    for page in document.pages:
        sections = _markdown_sections(page.text) if document.kind == "markdown" else [("", page.text)]
        for heading, body in sections:
            for text in _pack(_paragraphs(body, config.max_chars), config):
                chunks.append(Chunk(text=text, heading=heading, page=page.page, position=len(chunks)))
    return chunks


def _markdown_sections(text: str) -> list[tuple[str, str]]:
    sections: list[tuple[str, str]] = []
    path: list[tuple[int, str]] = []
    lines: list[str] = []
    in_code = False

    def flush() -> None:
        if "".join(lines).strip():
            sections.append((" > ".join(title for _, title in path), "\n".join(lines)))
        lines.clear()

    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        match = None if in_code else _HEADING.match(line)
        if match:
            flush()
            level = len(match.group(1))
            path = [(lvl, title) for lvl, title in path if lvl < level] + [(level, match.group(2))]
        else:
            lines.append(line)
    flush()
    return sections


def _paragraphs(text: str, max_chars: int) -> list[str]:
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        block = " ".join(block.split())
        if not block:
            continue
        if len(block) <= max_chars:
            paragraphs.append(block)
            continue
        current = ""
        for sentence in _SENTENCE_END.split(block):
            while len(sentence) > max_chars:  # a "sentence" with no end: hard split
                if current:
                    paragraphs.append(current)
                    current = ""
                paragraphs.append(sentence[:max_chars])
                sentence = sentence[max_chars:]
            if current and len(current) + 1 + len(sentence) > max_chars:
                paragraphs.append(current)
                current = sentence
            else:
                current = f"{current} {sentence}".strip()
        if current:
            paragraphs.append(current)
    return paragraphs


def _pack(units: list[str], config: ChunkingConfig) -> list[str]:
    """Greedily join units up to max_chars; each new chunk starts with the previous one's tail units."""
    chunks: list[str] = []
    current: list[str] = []
    fresh = 0  # units in `current` not yet emitted in an earlier chunk
    for unit in units:
        if current and fresh and len(" ".join([*current, unit])) > config.max_chars:
            chunks.append("\n\n".join(current))
            current = _tail(current, config.overlap_chars)
            fresh = 0
            if current and len(" ".join([*current, unit])) > config.max_chars:
                current = []
        current.append(unit)
        fresh += 1
    if current and fresh:
        chunks.append("\n\n".join(current))
    return chunks


def _tail(units: list[str], budget: int) -> list[str]:
    tail: list[str] = []
    for unit in reversed(units):
        if len(unit) + sum(len(u) for u in tail) > budget:
            break
        tail.insert(0, unit)
    return tail
