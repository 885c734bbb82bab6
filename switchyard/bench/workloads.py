"""What a benchmark sends: sessions of one or more turns, built from a named workload.

A session is the unit that arrives; its turns run one after another, each carrying the replies so far (the
`chat` and `tenants` workloads' histories grow with the server's actual answers). Every other workload has
one-turn sessions.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKLOADS = ("random", "prefix", "chat", "tenants", "jsonl", "tools")
CHAT_ONLY = ("chat", "tenants", "tools")

# Common short English words, mostly one token each in BPE vocabularies: the prompt filler without a tokenizer.
_WORD_TEXT = (
    "the of and to in is it you that he was for on are with as his they be at one have this from or had by "
    "word but what some we can out other were all there when up use your how said an each she which do their "
    "time if will way about many then them write would like so these her long make thing see him two has look "
    "more day could go come did number sound no most people my over know water than call first who may down "
    "side been now find any new work part take get place made live where after back little only round man year "
    "came show every good me give our under name very through just form sentence great think say help low line"
)
_WORDS = tuple(_WORD_TEXT.split())


class WorkloadError(ValueError):
    """A workload cannot be built from the options given (a bad file, a chat-only workload on completions)."""


@dataclass(frozen=True)
class Turn:
    """One request. `prompt` for the completions API; `messages` (new this turn) for the chat API."""

    max_tokens: int
    prompt: str | None = None
    messages: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    user: str | None = None
    """Sent as the request's `user` (the end user a conversation belongs to, which session routing keys on)."""


@dataclass(frozen=True)
class Session:
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class WorkloadOptions:
    """Every workload knob; each workload reads the ones it needs."""

    name: str = "random"
    api: str = "completions"
    """'completions' or 'chat'."""
    input_len: int = 256
    output_len: int = 128
    range_ratio: float = 0.0
    """Lengths are drawn uniformly from [len × (1 − r), len × (1 + r)]."""
    prefix_len: int = 256
    """Tokens of the shared prefix (`prefix`) or of each tenant's system prompt (`tenants`)."""
    num_prefixes: int = 4
    """Prefix families (`prefix`) or tenants (`tenants`)."""
    turns: int = 3
    """Turns per session (`chat`, `tenants`)."""
    dataset: Path | None = None
    tokenizer: Path | None = None
    """A tokenizer.json (or its folder): exact prompt lengths; without one, words stand in for tokens."""
    seed: int = 0


@dataclass
class PromptText:
    """Random text of a given length in tokens (with a tokenizer) or words (without)."""

    rng: random.Random
    tokenizer: Any = None
    _vocab: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.tokenizer is not None:
            special = set(self.tokenizer.get_added_tokens_decoder())
            # Tokens that decode to printable text on their own: byte pieces of a multi-byte character would
            # decode to U+FFFD, which re-encodes to three tokens.
            self._vocab = [
                i
                for i in range(self.tokenizer.get_vocab_size())
                if i not in special and _clean(self.tokenizer.decode([i]))
            ]

    def make(self, length: int) -> str:
        if self.tokenizer is None:
            return " ".join(self.rng.choice(_WORDS) for _ in range(length))
        ids = [self.rng.choice(self._vocab) for _ in range(length)]
        # Neighbours can merge when re-encoded: add or trim tokens until the text encodes to `length`.
        for _ in range(10):
            text = self.tokenizer.decode(ids)
            count = len(self.tokenizer.encode(text, add_special_tokens=False).ids)
            if count == length:
                break
            if count < length:
                ids += [self.rng.choice(self._vocab) for _ in range(length - count)]
            else:
                ids = ids[: len(ids) - (count - length)]
        return text


def _clean(piece: str) -> bool:
    return bool(piece.strip()) and "\ufffd" not in piece and piece.isprintable()


def load_tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer

    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise WorkloadError(f"no tokenizer.json at {path}")
    return Tokenizer.from_file(str(file))


def build_sessions(options: WorkloadOptions, count: int) -> list[Session]:
    """`count` sessions of the workload, reproducible from options.seed."""
    if options.name not in WORKLOADS:
        raise WorkloadError(f"unknown workload {options.name!r}; choose from {', '.join(WORKLOADS)}")
    if options.name in CHAT_ONLY and options.api != "chat":
        raise WorkloadError(f"the {options.name!r} workload needs the chat API (--api chat)")
    rng = random.Random(options.seed)
    text = PromptText(rng, load_tokenizer(options.tokenizer) if options.tokenizer else None)
    builder = {
        "random": _random,
        "prefix": _prefix,
        "chat": _chat,
        "tenants": _tenants,
        "jsonl": _jsonl,
        "tools": _tools,
    }
    return builder[options.name](options, count, rng, text)


def _length(rng: random.Random, mean: int, ratio: float) -> int:
    low, high = max(1, round(mean * (1 - ratio))), max(1, round(mean * (1 + ratio)))
    return rng.randint(low, high)


def _single(options: WorkloadOptions, prompt: str, max_tokens: int, system: str | None = None) -> Session:
    if options.api == "completions":
        return Session((Turn(max_tokens, prompt=(system or "") + prompt),))
    messages = ({"role": "system", "content": system},) if system else ()
    return Session((Turn(max_tokens, messages=(*messages, {"role": "user", "content": prompt})),))


def _random(options: WorkloadOptions, count: int, rng: random.Random, text: PromptText) -> list[Session]:
    return [
        _single(
            options,
            text.make(_length(rng, options.input_len, options.range_ratio)),
            _length(rng, options.output_len, options.range_ratio),
        )
        for _ in range(count)
    ]


def _prefix(options: WorkloadOptions, count: int, rng: random.Random, text: PromptText) -> list[Session]:
    """Families sharing a long prefix (a system prompt, few-shot examples) with distinct suffixes."""
    prefixes = [text.make(options.prefix_len) + "\n" for _ in range(options.num_prefixes)]
    return [
        _single(
            options,
            text.make(_length(rng, options.input_len, options.range_ratio)),
            _length(rng, options.output_len, options.range_ratio),
            system=prefixes[i % len(prefixes)],
        )
        for i in range(count)
    ]


def _chat(options: WorkloadOptions, count: int, rng: random.Random, text: PromptText) -> list[Session]:
    return [
        Session(
            tuple(
                Turn(
                    _length(rng, options.output_len, options.range_ratio),
                    messages=({"role": "user", "content": text.make(_length(rng, options.input_len, 0.0))},),
                )
                for _ in range(options.turns)
            )
        )
        for _ in range(count)
    ]


def _tenants(options: WorkloadOptions, count: int, rng: random.Random, text: PromptText) -> list[Session]:
    """A multi-tenant chat service: each tenant (`num_prefixes`) has its own system prompt of `prefix_len`
    tokens, and each session is one end user's conversation with a tenant's assistant, `turns` turns whose
    history grows. Session i belongs to tenant i mod N, so tenants' sessions arrive interleaved and run side by
    side: what a router gains by keeping a tenant's (and a conversation's) prefix on one replica."""
    systems = [text.make(options.prefix_len) for _ in range(options.num_prefixes)]
    sessions = []
    for number in range(count):
        tenant = number % len(systems)
        system = {"role": "system", "content": systems[tenant]}
        turns = []
        for turn in range(options.turns):
            ask = {"role": "user", "content": text.make(_length(rng, options.input_len, options.range_ratio))}
            turns.append(
                Turn(
                    _length(rng, options.output_len, options.range_ratio),
                    messages=(system, ask) if turn == 0 else (ask,),
                    user=f"tenant-{tenant}-session-{number}",
                )
            )
        sessions.append(Session(tuple(turns)))
    return sessions


def _jsonl(options: WorkloadOptions, count: int, rng: random.Random, text: PromptText) -> list[Session]:
    """One request per line: {"prompt": ...} or {"messages": [...]}, optional "max_tokens" and "tools"."""
    if options.dataset is None:
        raise WorkloadError("the 'jsonl' workload needs --dataset FILE")
    rows = _read_jsonl(options.dataset)
    if options.api != "chat":
        # Every row, not only the first `count`: the check before any traffic builds a single session.
        for number, row in rows:
            if "messages" in row:
                raise WorkloadError(f"{options.dataset}:{number} has messages; use --api chat")
    sessions = []
    for i in range(count):
        number, row = rows[i % len(rows)]
        max_tokens = int(row.get("max_tokens", options.output_len))
        tools = tuple(row.get("tools") or ())
        if "messages" in row:
            sessions.append(Session((Turn(max_tokens, messages=tuple(row["messages"]), tools=tools),)))
        else:
            prompt = str(row["prompt"])
            session = _single(options, prompt, max_tokens)
            if tools:
                session = Session((Turn(max_tokens, messages=session.turns[0].messages, tools=tools),))
            sessions.append(session)
    return sessions


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise WorkloadError(f"dataset file not found: {path}")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{number} is not JSON: {exc}") from None
        if not isinstance(row, dict) or not ("prompt" in row or "messages" in row):
            raise WorkloadError(f"{path}:{number} needs a 'prompt' or 'messages' field")
        if problem := _row_problem(row):
            raise WorkloadError(f"{path}:{number}: {problem}")
        rows.append((number, row))
    if not rows:
        raise WorkloadError(f"{path} holds no requests")
    return rows


def _row_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with a dataset row's fields, so a bad file fails before any traffic, naming its line."""
    if "prompt" in row and not isinstance(row["prompt"], str):
        return "'prompt' must be a string"
    messages = row.get("messages")
    if "messages" in row and (
        not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages)
    ):
        return "'messages' must be a non-empty list of message objects"
    max_tokens = row.get("max_tokens")
    if "max_tokens" in row and (type(max_tokens) is not int or max_tokens < 1):
        return f"'max_tokens' must be a positive integer, got {max_tokens!r}"
    tools = row.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        return "'tools' must be a list of tool objects"
    return None


TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert_currency",
            "description": "Convert an amount between two currencies.",
            "parameters": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number"},
                    "from": {"type": "string"},
                    "to": {"type": "string"},
                },
                "required": ["amount", "from", "to"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Find flights between two airports on a date.",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string"},
                    "destination": {"type": "string"},
                    "date": {"type": "string"},
                },
                "required": ["origin", "destination", "date"],
            },
        },
    },
)
_CITIES = ("Paris", "Lagos", "Osaka", "Lima", "Oslo", "Pune", "Quito", "Tunis")
_ASKS = (
    "What is the weather in {city} right now?",
    "How much is {amount} EUR in JPY?",
    "Find me a flight from {city} to {other} on 2025-07-{day:02d}.",
)


def _tools(options: WorkloadOptions, count: int, rng: random.Random, text: PromptText) -> list[Session]:
    """Requests that offer the model three tools and ask something one of them answers."""
    sessions = []
    for _ in range(count):
        ask = rng.choice(_ASKS).format(
            city=rng.choice(_CITIES),
            other=rng.choice(_CITIES),
            amount=rng.randint(5, 900),
            day=rng.randint(1, 28),
        )
        context = text.make(max(0, options.input_len - 16))
        content = f"{context}\n{ask}" if context else ask
        turn = Turn(
            _length(rng, options.output_len, options.range_ratio),
            messages=({"role": "user", "content": content},),
            tools=TOOLS,
        )
        sessions.append(Session((turn,)))
    return sessions
