"""Tool-call formats: how a model family writes a call, and one parser that reads it, streaming or not.

A format is data: the trigger that opens a call, a header pattern that ends where the arguments begin, the
key of the arguments, and a tail pattern that closes the call; plus the exact strings the grammar makes the
model write (`call_begin`/`call_end`). The parser is shared by every format, so each format's quirks live in
one place (its module) and a new format is a few lines plus `register_format`.

The arguments are read with a JSON scanner that tracks strings and escapes, never by searching for the
closing tag: a `</tool_call>` inside a string argument cannot end a call early.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import regex


@dataclass(frozen=True)
class ToolCallFormat:
    name: str
    trigger: str
    """Text that starts a call (what constrained decoding waits for in tool_choice "auto")."""
    header: str
    """Regex from the trigger to the first character of the arguments; group `name` is the JSON-escaped name."""
    tail: str
    """Regex after the arguments value up to the end of the call."""
    begin_template: str
    """What the grammar writes before the arguments; `{name}` is replaced by the tool's name."""
    call_end: str
    """What the grammar writes after the arguments."""
    separator: str
    """Between two calls in one turn (tool_choice "required" or a named tool)."""
    template_markers: tuple[str, ...] = ()
    """Substrings of a chat template that mark it as using this format."""
    next_call: str | None = None
    """Regex from the end of one call's arguments to the first character of the next call's, for formats that
    list several calls after one trigger (Mistral's JSON list); group `name` as in `header`."""
    new_call_id: Callable[[], str] = field(default=lambda: f"call_{uuid.uuid4().hex[:24]}")
    """A fresh id for a parsed call."""
    template_call_id: Callable[[str], str] | None = None
    """Rewrites the call ids of a conversation into what the chat template accepts (Mistral's demand nine
    letters and digits and raise otherwise); None passes them as the client sent them."""

    def call_begin(self, name: str) -> str:
        return self.begin_template.replace("{name}", name)

    def parser(self) -> ToolCallParser:
        return ToolCallParser(self)

    def parse(self, text: str, truncated: bool = False) -> ParsedToolCalls:
        """Content and calls of a finished reply (`truncated`: it ended at max_tokens, see finish())."""
        parser = self.parser()
        parser.feed(text)
        parser.finish(truncated)
        return parser.result()


_REGISTRY: dict[str, ToolCallFormat] = {}


def register_format(fmt: ToolCallFormat) -> ToolCallFormat:
    _REGISTRY[fmt.name] = fmt
    return fmt


def registered_formats() -> list[str]:
    return sorted(_REGISTRY)


def get_format(name: str) -> ToolCallFormat:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown tool-call format {name!r}; known: {', '.join(registered_formats())}"
        ) from None


def detect_format(chat_template: str | None, default: str = "hermes") -> ToolCallFormat:
    """The format whose markers the chat template contains (Hermes/Qwen `<tool_call>` when none match)."""
    for fmt in _REGISTRY.values():
        if chat_template and any(marker in chat_template for marker in fmt.template_markers):
            return fmt
    return get_format(default)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments as the model wrote them (a JSON text)."""
    complete: bool = False
    """The call's tail was read (False: the reply ended inside the call, e.g. at max_tokens)."""


@dataclass
class ParsedToolCalls:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class CallStarted:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ArgumentsDelta:
    index: int
    text: str


ParserEvent = ContentDelta | CallStarted | ArgumentsDelta


class ToolCallParser:
    """Incremental reader of one reply: feed text deltas, get content and tool-call events."""

    def __init__(self, fmt: ToolCallFormat) -> None:
        self.format = fmt
        self._header = regex.compile(fmt.header, regex.DOTALL)
        self._tail = regex.compile(fmt.tail, regex.DOTALL)
        self._next_call = regex.compile(fmt.next_call, regex.DOTALL) if fmt.next_call else None
        self._buffer = ""
        self._state = "text"
        self._scanner = JsonValueScanner()
        self._content: list[str] = []
        self._after_call = False
        self._cut_call = False
        self.calls: list[ToolCall] = []

    def feed(self, text: str) -> list[ParserEvent]:
        self._buffer += text
        events: list[ParserEvent] = []
        while self._step(events):
            pass
        return events

    def finish(self, truncated: bool = False) -> list[ParserEvent]:
        """End of the reply. A call cut off before its arguments began is dropped: it names no call. Text held
        back as a possible trigger is content, unless the reply was `truncated` (hit max_tokens), where it is
        most likely the start of a call that had no room."""
        events: list[ParserEvent] = []
        if self._state == "tail":  # a whole tail that could have gone on (an optional `;`), or a cut one
            tail = self._tail.match(self._buffer)
            listed = self._next_call is not None and self._next_call.match(self._buffer, partial=True)
            if tail is None:
                self._buffer = ""  # the start of a closing tag, not content
                if listed:  # the call was whole and the next one in its list was cut before its arguments
                    self.calls[-1].complete = True
                    self._cut_call = True
            self._end_call(tail)
            while self._step(events):
                pass
        if self._state == "text" and self._buffer and not truncated:
            self._emit_content(self._buffer, events)
        self._cut_call = (
            self._cut_call
            or self._state == "header"
            or (self._state == "text" and truncated and bool(self._buffer))
        )
        self._buffer = ""
        return events

    def result(self) -> ParsedToolCalls:
        content = "".join(self._content)
        if self.calls or self._cut_call:
            content = content.strip()
        return ParsedToolCalls(content=content or None, tool_calls=list(self.calls))

    # ----------------------------------------------------------------- states
    def _step(self, events: list[ParserEvent]) -> bool:
        """Advance through the buffer as far as it allows; True if the state changed and may go further."""
        buffer = self._buffer
        if not buffer:
            return False
        if self._state == "text":
            start = buffer.find(self.format.trigger)
            if start < 0:
                keep = _partial_suffix(buffer, self.format.trigger)
                self._emit_content(buffer[: len(buffer) - keep], events)
                self._buffer = buffer[len(buffer) - keep :]
                return False
            self._emit_content(buffer[:start], events)
            self._buffer = buffer[start:]
            self._state = "header"
            return True
        if self._state == "header":
            match = self._header.match(buffer, partial=True)
            if match is not None and match.partial:
                return False  # wait for more text
            if match is None or match.end() == len(buffer):
                if match is None:  # the trigger was plain text, not a call
                    self._emit_content(self.format.trigger, events)
                    self._buffer = buffer[len(self.format.trigger) :]
                    self._state = "text"
                    return True
                return (
                    False  # the header matched, but whitespace may continue: wait for the value's first char
                )
            name = _json_name(match.group("name"))
            if name is None:  # a name with a broken escape: no call of any tool, so plain text
                self._emit_content(self.format.trigger, events)
                self._buffer = buffer[len(self.format.trigger) :]
                self._state = "text"
                return True
            self._start_call(name, match.end(), events)
            return True
        if self._state == "arguments":
            used = self._scanner.feed(buffer)
            if used:
                self.calls[-1].arguments += buffer[:used]
                events.append(ArgumentsDelta(len(self.calls) - 1, buffer[:used]))
            self._buffer = buffer[used:]
            if self._scanner.done:
                self._state = "tail"
                return True
            return False
        # tail, or in a listing format the next call of the list
        if self._next_call is not None:
            listed = self._next_call.match(buffer, partial=True)
            if listed is not None:
                if listed.partial or listed.end() == len(buffer):
                    return False  # wait for the next call's name, or its arguments' first character
                name = _json_name(listed.group("name"))
                if name is not None:
                    self.calls[-1].complete = True
                    self._start_call(name, listed.end(), events)
                    return True
        match = self._tail.match(buffer, partial=True)
        if match is not None and (match.partial or match.end() == len(buffer)):
            return False  # the tail may go on (whitespace, an optional `;`): wait, or let finish() end it
        self._end_call(match)
        return True

    def _start_call(self, name: str, arguments_at: int, events: list[ParserEvent]) -> None:
        """A call of `name` whose arguments start at `arguments_at` in the buffer."""
        call = ToolCall(id=self.format.new_call_id(), name=name, arguments="")
        self.calls.append(call)
        events.append(CallStarted(len(self.calls) - 1, call.id, name))
        self._buffer = self._buffer[arguments_at:]
        self._scanner = JsonValueScanner()
        self._state = "arguments"

    def _end_call(self, tail: regex.Match[str] | None) -> None:
        """Leave the call whose arguments ended; `tail` is its closing text, None when it is missing."""
        if tail is not None:
            self.calls[-1].complete = True
            self._buffer = self._buffer[tail.end() :]
        self._after_call = True
        self._state = "text"

    def _emit_content(self, text: str, events: list[ParserEvent]) -> None:
        if self._after_call:  # whitespace between or after calls is layout, not content
            text = text.lstrip()
            self._after_call = not text
        if text:
            self._content.append(text)
            events.append(ContentDelta(text))


def _json_name(escaped: str) -> str | None:
    """A call's name as written inside JSON quotes; None when its escapes are broken."""
    try:
        return str(json.loads('"' + escaped + '"'))
    except ValueError:
        return None


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker` (held back: may be a call)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class JsonValueScanner:
    """Finds where one JSON value ends in text that arrives in pieces (strings and escapes aware)."""

    def __init__(self) -> None:
        self.depth = 0
        self.started = False
        self.in_string = False
        self.escaped = False
        self.scalar = False
        self.done = False

    def feed(self, text: str) -> int:
        """Consume text; return how many of its characters belong to the value (all, until it ends)."""
        for index, char in enumerate(text):
            if self.done:
                return index
            if not self.started:
                self.started = True
                if char in "{[":
                    self.depth = 1
                elif char == '"':
                    self.in_string = True
                else:
                    self.scalar = True
                continue
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
                    if self.depth == 0:
                        self.done = True
                        return index + 1
                continue
            if self.scalar:
                if char in " \t\r\n,}];":
                    self.done = True
                    return index
                continue
            if char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return index + 1
        return len(text)
