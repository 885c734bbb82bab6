"""Turns one sequence's output tokens into streamed text, as they arrive.

Why it is not `tokenizer.decode(token)` per token: byte-level BPE splits a UTF-8 character across tokens and
decoders add spaces depending on the neighbouring tokens, so text is decoded with context and held back until
its characters are complete. Stop strings may span tokens, so text that could still begin one is held back
too. Invariant: the concatenation of every `new_text` returned (plus `flush()`) equals `text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from transformers import PreTrainedTokenizerBase

from switchyard.errors import InvalidRequestError

try:
    from tokenizers import Tokenizer as BackendTokenizer
    from tokenizers.decoders import DecodeStream
except ImportError:  # tokenizers < 0.21 has no DecodeStream; the Python offset decoder serves instead.
    BackendTokenizer = None  # type: ignore[assignment,misc]
    DecodeStream = None  # type: ignore[assignment,misc]

PROMPT_CONTEXT_TOKENS = 4
"""Trailing prompt tokens the first output tokens are decoded after, so their spacing is right (as in vLLM)."""

_REPLACEMENT_CHAR = "\ufffd"


class DetokenizerUpdate(NamedTuple):
    """What one `add_tokens` call produced."""

    new_text: str
    """Text that became final with this call; may be empty (incomplete character, possible stop string)."""
    stop_string: str | None = None
    """The stop string that ended the sequence during this call, else None."""


_NOTHING = DetokenizerUpdate("")


class _TokenStream(Protocol):
    """Decodes token ids one at a time into complete text, holding back incomplete characters."""

    def step(self, token_id: int) -> str | None: ...

    def flush(self) -> str: ...


class _RustStream:
    """tokenizers' DecodeStream (all in Rust), plus the ids it holds back so `flush` can release them."""

    __slots__ = ("_backend", "_context", "_held", "_last_emitted", "_skip", "_stream")

    def __init__(self, backend: BackendTokenizer, context_ids: list[int], skip_special_tokens: bool) -> None:
        self._backend = backend
        self._skip = skip_special_tokens
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self._context = context_ids
        complete = self._prime(context_ids)
        if complete < len(context_ids):
            # The context ends inside a character (a prompt of token ids may) or does not decode: the stream
            # would release the held-back prompt bytes, as U+FFFD, with the first output text. They are the
            # prompt's, so the context stops after its last complete character instead.
            self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
            self._context = context_ids[:complete]
            self._prime(self._context)
        self._last_emitted: int | None = None
        self._held: list[int] = []

    def _prime(self, context_ids: list[int]) -> int:
        """Step the fresh stream through the context; return how many leading ids it turned into final text."""
        complete = 0
        try:
            for i, token_id in enumerate(context_ids):  # priming by steps works on every DecodeStream version
                if self._stream.step(self._backend, token_id) is not None:
                    complete = i + 1
        except Exception:  # see `step`: the context is cut where it stopped decoding rather than fail
            pass
        return complete

    def step(self, token_id: int) -> str | None:
        try:
            piece = self._stream.step(self._backend, token_id)
        except Exception:  # tokenizers raises plain Exception
            # DecodeStream fails when a decode does not extend the previous one ("invalid prefix"), which a
            # few decoders produce; restart it without context rather than fail the request (as vLLM does).
            self._stream = DecodeStream(skip_special_tokens=self._skip)
            self._context, self._last_emitted, self._held = [], None, []
            piece = self._stream.step(self._backend, token_id)
        if piece is None:
            self._held.append(token_id)
        else:
            self._last_emitted = token_id
            if self._held:
                self._held = []
        return piece

    def flush(self) -> str:
        """Decode whatever DecodeStream still holds (an unfinished or invalid UTF-8 tail) as `decode` would."""
        if not self._held:
            return ""
        # The last emitting token ends on a character boundary, so it is enough context for spacing.
        context = self._context if self._last_emitted is None else [self._last_emitted]
        before = self._backend.decode(context, skip_special_tokens=self._skip)
        after = self._backend.decode(context + self._held, skip_special_tokens=self._skip)
        self._held = []
        return after[len(before) :]


class _OffsetStream:
    """Prefix/read-offset incremental decoding through `tokenizer.decode`, for tokenizers without a Rust backend.

    `prefix_text` is the decode of ids[prefix:read] (already emitted); each step decodes ids[prefix:] and emits
    what lies beyond `prefix_text` once it no longer ends in an incomplete character.
    """

    __slots__ = ("_ids", "_prefix_text", "_read", "_skip", "_tokenizer")

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, context_ids: list[int], skip_special_tokens: bool
    ) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._ids = list(context_ids)
        self._read = len(self._ids)
        self._prefix_text = self._decode(self._ids)

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip)

    def step(self, token_id: int) -> str | None:
        self._ids.append(token_id)
        text = self._decode(self._ids)
        if len(text) <= len(self._prefix_text) or text.endswith(_REPLACEMENT_CHAR):
            return None
        return self._advance(text)

    def flush(self) -> str:
        if self._read == len(self._ids):
            return ""
        return self._advance(self._decode(self._ids))

    def _advance(self, text: str) -> str:
        """Emit `text` beyond the prefix; the ids read so far become the next prefix (older ids are dropped)."""
        piece = text[len(self._prefix_text) :]
        del self._ids[: self._read]
        self._read = len(self._ids)
        self._prefix_text = self._decode(self._ids)
        return piece


def _make_stream(
    tokenizer: PreTrainedTokenizerBase, context_ids: list[int], skip_special_tokens: bool
) -> _TokenStream:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if DecodeStream is not None and isinstance(backend, BackendTokenizer):
        return _RustStream(backend, context_ids, skip_special_tokens)
    return _OffsetStream(tokenizer, context_ids, skip_special_tokens)


class IncrementalDetokenizer:
    """One sequence's output text, built as its tokens arrive. Create one per sequence; not thread-safe.

    Text is decoded in the context of the last few prompt tokens, so for byte-level BPE tokenizers the streamed
    text equals `tokenizer.decode(output_ids)`; SentencePiece-style tokenizers keep the leading space of the
    first output token (as vLLM does), which `decode` of the output alone would strip.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt_token_ids: Sequence[int],
        *,
        skip_special_tokens: bool = True,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
        min_tokens: int = 0,
    ) -> None:
        """`min_tokens`: stop strings are only looked for once this many output tokens were added (text before
        that is emitted as is), matching SamplingParams.min_tokens."""
        if any(not s for s in stop):
            raise InvalidRequestError("stop strings must be non-empty", "stop")
        context = list(prompt_token_ids[-PROMPT_CONTEXT_TOKENS:])
        self._stream = _make_stream(tokenizer, context, skip_special_tokens)
        self._stops = tuple(stop)
        self._include_stop = include_stop_str_in_output
        self._min_tokens = min_tokens
        self._num_tokens = 0
        # A text can only end in the start of a stop string if its last character occurs in some stop string
        # (not as its last character); checking that first keeps the common case to one set lookup.
        self._stop_prefix_chars = frozenset(c for s in self._stops for c in s[:-1])
        self._chunks: list[str] = []
        self._held = ""
        self._stop_string: str | None = None
        self._finished = False

    @property
    def text(self) -> str:
        """All text emitted so far; the final output text once finished."""
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def stop_string(self) -> str | None:
        """The stop string that ended the sequence, or None."""
        return self._stop_string

    @property
    def finished(self) -> bool:
        """True after a stop string matched or `flush` was called; later tokens are ignored."""
        return self._finished

    def add_tokens(self, token_ids: Sequence[int]) -> DetokenizerUpdate:
        """Decode newly sampled tokens; returns the text now safe to stream and any stop string matched."""
        if self._finished:
            return _NOTHING
        self._num_tokens += len(token_ids)
        step = self._stream.step
        if len(token_ids) == 1:
            text = step(token_ids[0]) or ""
        else:
            text = "".join([piece for piece in map(step, token_ids) if piece])
        if not self._stops or self._num_tokens < self._min_tokens:
            if not text:
                return _NOTHING
            self._chunks.append(text)
            return DetokenizerUpdate(text)
        return self._emit(text, final=False)

    def flush(self) -> str:
        """Finish a sequence that ended without a stop string: release held-back text and return it."""
        if self._finished:
            return ""
        self._finished = True
        text = self._stream.flush()
        if not self._stops:
            if text:
                self._chunks.append(text)
            return text
        return self._emit(text, final=True).new_text

    def _emit(self, text: str, final: bool) -> DetokenizerUpdate:
        """Cut at the first stop string, or emit all but a tail that may still become one."""
        pending = self._held + text
        if not pending:
            return _NOTHING
        match = self._first_stop(pending)
        if match is not None:
            start, stop = match
            new_text = pending[: start + len(stop) if self._include_stop else start]
            self._held = ""
            self._stop_string = stop
            self._finished = True
        else:
            keep = 0 if final else self._possible_stop_start(pending)
            new_text = pending[: len(pending) - keep]
            self._held = pending[len(pending) - keep :]
        if new_text:
            self._chunks.append(new_text)
        return DetokenizerUpdate(new_text, self._stop_string)

    def _first_stop(self, text: str) -> tuple[int, str] | None:
        """The stop string that completes first in `text` (the longest on a tie), with its start index."""
        best: tuple[int, int, str] | None = None
        for stop in self._stops:
            start = text.find(stop)
            if start != -1:
                candidate = (start + len(stop), start, stop)
                if best is None or candidate[:2] < best[:2]:
                    best = candidate
        return None if best is None else (best[1], best[2])

    def _possible_stop_start(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
        if text[-1] not in self._stop_prefix_chars:
            return 0
        longest = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:length]):
                    longest = length
                    break
        return longest
