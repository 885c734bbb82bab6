"""Text that cannot be encoded: lone UTF-16 surrogates in parsed JSON (shared by the server and the gateway).

JSON may spell a character as `\\ud800` without its pair, and Python's parser turns that into a str no
encoder accepts: it would fail later, deep inside a tokenizer, a metrics exposition or a log line, as a 500.
Checking a parsed body once, where it enters, turns that into one clear 400 for every field at once.
"""

from __future__ import annotations

from typing import Any


def lone_surrogate_path(value: Any) -> str | None:
    """The dotted path (`messages.0.content`) of the first string, key or value, in a parsed JSON value that
    holds a lone surrogate; None when every string encodes as UTF-8."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not _encodes(item):
                return path or "body"
        elif isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{path}.{key}" if path else str(key)
                if not _encodes(key):
                    return path or "body"
                stack.append((child_path, child))
        elif isinstance(item, list):
            stack.extend(
                (f"{path}.{index}" if path else str(index), child) for index, child in enumerate(item)
            )
    return None


def _encodes(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
