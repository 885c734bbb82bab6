"""Prompt lookup: propose what followed the latest earlier occurrence of a sequence's last n tokens."""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import Protocol

import torch


class Proposer(Protocol):
    def propose(self, token_ids: Seq[int], k: int) -> tuple[list[int], torch.Tensor | None]:
        """Up to k next tokens and their proposal distributions ([len, vocab]) or None for point masses."""
        ...


class NgramProposer:
    """Prompt lookup: find the latest earlier occurrence of the sequence's last n tokens (longest n first)
    and propose what followed it. Free to compute; strong on copy-heavy tasks (edits, quoting, code)."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max

    def propose(self, token_ids: Seq[int], k: int) -> tuple[list[int], torch.Tensor | None]:
        tokens = list(token_ids)
        length = len(tokens)
        for n in range(min(self.ngram_max, length - 1), self.ngram_min - 1, -1):
            suffix = tokens[length - n :]
            # Latest earlier match whose continuation is non-empty.
            for start in range(length - n - 1, -1, -1):
                if tokens[start : start + n] == suffix:
                    # Copy what followed the match; a match within the last k tokens means a repeating
                    # cycle, whose continuation is the cycle itself (copied from the growing proposal).
                    extended = tokens[:]
                    for j in range(k):
                        extended.append(extended[start + n + j])
                    return extended[length:], None
        return [], None
