"""Token ids of rendered chat text, encoded piece by piece between the tokenizer's added tokens, each piece
remembered.

kv_aware routing tokenizes every request's whole prompt in the gateway: a tenant's system prompt in every
request, a session's history again at every turn, where only the newest message is new text. Encoding was
most of that cost (a 3.5k-token chat: 1.7 ms of encoding beside 0.08 ms of template rendering). A tokenizer
splits its added tokens (`<|im_start|>`, `<tool_call>`) out of the text before its model sees it, so the
pieces between them encode on their own to the ids of the whole; a piece seen before (the system prompt, an
earlier turn) is looked up instead of encoded.

That holds for tokenizers whose normalizer and pre-tokenizer see one piece at a time. Not all do (a
SentencePiece-style `Metaspace` that prepends a space to the text's first piece only; an added token that
strips the whitespace beside it), so the encoder checks itself against a whole encode on its first texts and
then on a sample of them, and on the first difference encodes whole texts for good.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from typing import Protocol

logger = logging.getLogger(__name__)


class TextEncoder(Protocol):
    """What the encoder needs of a Hugging Face tokenizer."""

    @property
    def added_tokens_encoder(self) -> dict[str, int]: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


class PieceEncoder:
    """`encode(text)` equals `tokenizer.encode(text, add_special_tokens=False)`, from remembered pieces.

    Not thread-safe: the gateway calls it from its one tokenizer thread (prompt_tokens.PromptTokenizer).
    """

    def __init__(
        self,
        tokenizer: TextEncoder,
        max_chars: int = 4_000_000,
        check_first: int = 16,
        check_every: int = 64,
    ) -> None:
        """`max_chars`: text remembered at most (least recently used pieces go first); `check_first` texts
        are checked against a whole encode, then one in `check_every`."""
        if max_chars < 0 or check_first < 0 or check_every < 1:
            raise ValueError("max_chars and check_first must be >= 0 and check_every >= 1")
        self._tokenizer = tokenizer
        self._added = dict(tokenizer.added_tokens_encoder)
        longest_first = sorted(self._added, key=len, reverse=True)
        self._splitter = re.compile("|".join(map(re.escape, longest_first))) if longest_first else None
        self.pieces_allowed = self._splitter is not None
        """False once a piecewise encode differed from the whole one (or with no added tokens to split at)."""
        self._max_chars = max_chars
        self._check_first = check_first
        self._check_every = check_every
        self._pieces: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._chars = 0
        self._texts = 0
        self.hits = 0
        self.misses = 0

    def encode(self, text: str) -> tuple[int, ...]:
        if not self.pieces_allowed:
            return self._whole(text)
        ids = self._by_pieces(text)
        self._texts += 1
        if self._texts <= self._check_first or self._texts % self._check_every == 0:
            whole = self._whole(text)
            if whole != ids:
                self.pieces_allowed = False
                self._pieces.clear()
                self._chars = 0
                logger.warning(
                    "this tokenizer does not encode the pieces between its added tokens on their own; "
                    "the gateway now encodes whole prompts (slower kv_aware routing, same result)"
                )
                return whole
        return ids

    def _whole(self, text: str) -> tuple[int, ...]:
        return tuple(self._tokenizer.encode(text, add_special_tokens=False))

    def _by_pieces(self, text: str) -> tuple[int, ...]:
        assert self._splitter is not None
        ids: list[int] = []
        start = 0
        for match in self._splitter.finditer(text):
            if match.start() > start:
                ids.extend(self._piece(text[start : match.start()]))
            ids.append(self._added[match.group()])
            start = match.end()
        if start < len(text):
            ids.extend(self._piece(text[start:]))
        return tuple(ids)

    def _piece(self, piece: str) -> tuple[int, ...]:
        found = self._pieces.get(piece)
        if found is not None:
            self._pieces.move_to_end(piece)
            self.hits += 1
            return found
        self.misses += 1
        ids = self._whole(piece)
        if len(piece) <= self._max_chars:
            self._pieces[piece] = ids
            self._chars += len(piece)
            while self._chars > self._max_chars:
                evicted, _ = self._pieces.popitem(last=False)
                self._chars -= len(evicted)
        return ids
