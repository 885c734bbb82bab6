"""Comparison forms: when two answers count as the same value despite case, spacing or number formatting."""

from __future__ import annotations

import re
from typing import Any

_EDGE_PUNCTUATION = re.compile(r"^[\W_]+|[\W_]+$")


def normalize(value: Any) -> Any:
    """Comparison form of a JSON value: strings without case or whitespace, all numbers as floats.

    This is the quality gate's rule: "Oslo" matches " oslo ", 5 matches 5.0, "New York" matches "NewYork"."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return "".join(value.split()).casefold()
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    return value


def plain_text(text: str) -> str:
    """A short answer's comparison form: case folded, spaces collapsed, punctuation at the ends dropped."""
    return _EDGE_PUNCTUATION.sub("", " ".join(text.split()).casefold())


def admits(text: str, phrases: tuple[str, ...] | list[str]) -> bool:
    """Whether the text contains one of the phrases (case folded, typographic apostrophes made plain)."""
    lowered = text.casefold().replace("’", "'")
    return any(phrase.casefold() in lowered for phrase in phrases)
