"""Suites as data: a JSONL file of cases, each with the checks that score it.

The first line may be the suite's header, `{"suite": {...}}`: its name and description, the default scorer
of cases that give only `expected`, default parameters per scorer, the pass-rate thresholds per metric, default
request parameters, the agent config of agent cases and the collections of RAG cases. Every later line is a
case, of one of three kinds:

- chat: `{"id", "messages", "tools"?, "params"?, "checks"}`: one chat completion request.
- agent: `{"id", "kind": "agent", "input", "instructions"?, "tools"?, "recorded"?, "approve"?, "checks"}`: an
  agent run over the suite's agent config, tools answering from recorded results.
- rag: `{"id", "kind": "rag", "question", "collection", "checks"}`: retrieve passages, answer with citations.

A check is `{"scorer": NAME, "metric"?: NAME, ...parameters}`; its metric (the scorer's name by default) is
what the summary reports a rate for. Loading validates everything (kinds, fields, scorer names and
parameters, unique ids) and names the file and line of the first problem.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from switchyard.errors import SwitchyardError
from switchyard.evals.scorers import UnknownScorerError, get_scorer

SUITES_DIR = Path(__file__).resolve().parent / "suites"
"""The suites that ship with Switchyard (`switchyard eval list`)."""


class SuiteError(SwitchyardError, ValueError):
    """A suite file that cannot be used; the message names the file and line."""

    def __init__(self, path: Path, line: int | None, message: str) -> None:
        self.path, self.line = path, line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


class CaseKind(StrEnum):
    CHAT = "chat"
    AGENT = "agent"
    RAG = "rag"


@dataclass(frozen=True)
class Check:
    scorer: str
    metric: str
    """The name the summary reports; checks of one metric across cases are pooled into one rate."""
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatCase:
    id: str
    messages: list[dict[str, Any]]
    checks: tuple[Check, ...]
    tools: list[dict[str, Any]] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    """Request parameters (temperature, max_tokens, response_format, ...) over the suite's defaults."""
    tags: tuple[str, ...] = ()
    kind: CaseKind = CaseKind.CHAT

    @property
    def prompt(self) -> str:
        users = [m for m in self.messages if m.get("role") == "user"]
        return str(users[-1].get("content") or "") if users else ""


@dataclass(frozen=True)
class Recording:
    """A tool's recorded result: returned when the call's arguments match (always, when `arguments` is None)."""

    result: Any
    arguments: Mapping[str, Any] | None = None
    injected: bool = False
    """The result carries an injected instruction (what `injection_resisted` checks the run against)."""


@dataclass(frozen=True)
class AgentCase:
    id: str
    input: str
    checks: tuple[Check, ...]
    instructions: str | None = None
    """Replaces the agent config's system prompt for this case."""
    tools: tuple[str, ...] | None = None
    """The config's tools offered in this case, in this order (all of them when None)."""
    recorded: Mapping[str, tuple[Recording, ...]] = field(default_factory=dict)
    """Tool name -> results, over the config's own recordings."""
    approve: tuple[Mapping[str, Any], ...] = ()
    """Calls ({"name", "arguments"}) the user approves when the runtime asks; every other request is refused."""
    tags: tuple[str, ...] = ()
    kind: CaseKind = CaseKind.AGENT

    @property
    def prompt(self) -> str:
        return self.input


@dataclass(frozen=True)
class RagCase:
    id: str
    question: str
    collection: str
    checks: tuple[Check, ...]
    tags: tuple[str, ...] = ()
    kind: CaseKind = CaseKind.RAG

    @property
    def prompt(self) -> str:
        return self.question


Case = ChatCase | AgentCase | RagCase


@dataclass(frozen=True)
class RagSettings:
    collections: Mapping[str, Path] = field(default_factory=dict)
    """Collection name -> folder of documents (relative paths resolve against the suite file)."""
    k: int = 4
    prompt: str | None = None
    """User message with {passages} and {question}; None uses the agents' RAG prompt (`rag_messages`)."""
    passage: str = "[{n}] {text}"
    """How one passage is written into `prompt` ({n}, {text}, {source})."""
    chunk_chars: int = 1000
    overlap_chars: int = 200


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    cases: tuple[Case, ...]
    description: str = ""
    thresholds: Mapping[str, float] = field(default_factory=dict)
    """Metric -> the pass rate it must reach; a run below one fails (exit status 1)."""
    agent_config: Path | None = None
    rag: RagSettings = field(default_factory=RagSettings)
    sha256: str = ""
    """Of the file's bytes: a resumed run checks it is still scoring the same suite."""

    def metrics(self) -> list[str]:
        """Every metric the cases check, in first-seen order."""
        return list(dict.fromkeys(c.metric for case in self.cases for c in case.checks))


_HEADER_KEYS = {
    "name",
    "description",
    "scorer",
    "defaults",
    "thresholds",
    "params",
    "agent",
    "rag",
    "generated_by",
}
_CASE_KEYS = {
    CaseKind.CHAT: {"id", "kind", "messages", "tools", "params", "checks", "expected", "tags"},
    CaseKind.AGENT: {
        "id",
        "kind",
        "input",
        "instructions",
        "tools",
        "recorded",
        "approve",
        "checks",
        "expected",
        "tags",
    },
    CaseKind.RAG: {"id", "kind", "question", "collection", "checks", "expected", "tags"},
}
_RAG_KEYS = {"collections", "k", "prompt", "passage", "chunk_chars", "overlap_chars"}


@dataclass(frozen=True)
class _Header:
    name: str
    description: str = ""
    scorer: str | None = None
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    thresholds: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    agent: Path | None = None
    rag: RagSettings = field(default_factory=RagSettings)


def shipped_suites() -> dict[str, Path]:
    """Name -> file of every suite that ships with Switchyard."""
    return {path.stem: path for path in sorted(SUITES_DIR.glob("*.jsonl"))}


def resolve_suite(name_or_path: str | Path) -> Path:
    """A suite file given as a path, or the shipped suite of that name."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = shipped_suites()
    if str(name_or_path) in shipped:
        return shipped[str(name_or_path)]
    raise SuiteError(
        path, None, f"no such suite file, and no shipped suite of that name (shipped: {', '.join(shipped)})"
    )


def load_suite(name_or_path: str | Path) -> Suite:
    path = resolve_suite(name_or_path)
    raw = path.read_bytes()
    header = _Header(name=path.stem)
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SuiteError(path, number, f"not JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(value, dict):
            raise SuiteError(path, number, "a line must be a JSON object")
        try:
            if "suite" in value:
                if cases or number != _first_line(raw):
                    raise ValueError("the suite header must be the first line")
                header = _parse_header(value["suite"], path)
                continue
            case = _parse_case(value, header)
        except (ValueError, TypeError, KeyError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise SuiteError(path, number, str(message)) from None
        if case.id in seen:
            raise SuiteError(path, number, f"case id {case.id!r} repeats line {seen[case.id]}")
        seen[case.id] = number
        cases.append(case)
    if not cases:
        raise SuiteError(path, None, "the suite has no cases")
    suite = Suite(
        name=header.name,
        path=path,
        cases=tuple(cases),
        description=header.description,
        thresholds=header.thresholds,
        agent_config=header.agent,
        rag=header.rag,
        sha256=hashlib.sha256(raw).hexdigest(),
    )
    _check_references(suite)
    return suite


def _first_line(raw: bytes) -> int:
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if line.strip():
            return number
    return 1


def _parse_header(raw: Any, path: Path) -> _Header:
    if not isinstance(raw, dict):
        raise ValueError('"suite" must be an object')
    _no_unknown(raw, _HEADER_KEYS, "suite header")
    if "name" not in raw:
        raise ValueError("the suite header needs a name")
    scorer = raw.get("scorer")
    if scorer is not None:
        get_scorer(scorer)
    defaults = raw.get("defaults", {})
    for name, params in defaults.items():
        get_scorer(name)
        if not isinstance(params, dict):
            raise ValueError(f"defaults of {name!r} must be an object")
    thresholds = {str(k): float(v) for k, v in raw.get("thresholds", {}).items()}
    for metric, target in thresholds.items():
        if not 0.0 <= target <= 1.0:
            raise ValueError(f"threshold of {metric!r} must be a rate in [0, 1], got {target}")
    agent = raw.get("agent")
    return _Header(
        name=str(raw["name"]),
        description=str(raw.get("description", "")),
        scorer=scorer,
        defaults=defaults,
        thresholds=thresholds,
        params=dict(raw.get("params", {})),
        agent=(path.parent / agent).resolve() if agent else None,
        rag=_parse_rag(raw.get("rag", {}), path),
    )


def _parse_rag(raw: Any, path: Path) -> RagSettings:
    if not isinstance(raw, dict):
        raise ValueError('"rag" must be an object')
    _no_unknown(raw, _RAG_KEYS, "rag settings")
    collections = {
        str(name): (path.parent / folder).resolve() for name, folder in raw.get("collections", {}).items()
    }
    prompt = raw.get("prompt")
    if prompt is not None and ("{passages}" not in prompt or "{question}" not in prompt):
        raise ValueError("the rag prompt must contain {passages} and {question}")
    return RagSettings(
        collections=collections,
        k=int(raw.get("k", 4)),
        prompt=prompt,
        passage=str(raw.get("passage", "[{n}] {text}")),
        chunk_chars=int(raw.get("chunk_chars", 1000)),
        overlap_chars=int(raw.get("overlap_chars", 200)),
    )


def _no_unknown(raw: Mapping[str, Any], known: set[str], what: str) -> None:
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"unknown field(s) in the {what}: {', '.join(sorted(unknown))}")


def _kind_of(raw: Mapping[str, Any]) -> CaseKind:
    if "kind" in raw:
        try:
            return CaseKind(raw["kind"])
        except ValueError:
            raise ValueError(f"unknown case kind {raw['kind']!r} (chat, agent or rag)") from None
    if "input" in raw:
        return CaseKind.AGENT
    if "question" in raw:
        return CaseKind.RAG
    return CaseKind.CHAT


def _parse_case(raw: dict[str, Any], header: _Header) -> Case:
    if "id" not in raw:
        raise ValueError("a case needs an id")
    kind = _kind_of(raw)
    _no_unknown(raw, _CASE_KEYS[kind], f"{kind} case")
    case_id = str(raw["id"])
    checks = _parse_checks(raw, header)
    tags = tuple(str(t) for t in raw.get("tags", ()))
    if kind is CaseKind.CHAT:
        messages = raw.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ValueError("a chat case needs messages: a non-empty list of message objects")
        tools = raw.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise ValueError("tools must be a list of tool specs")
        return ChatCase(case_id, messages, checks, tools, {**header.params, **raw.get("params", {})}, tags)
    if kind is CaseKind.AGENT:
        if not isinstance(raw.get("input"), str):
            raise ValueError("an agent case needs an input string")
        recorded = {
            str(name): tuple(_parse_recording(r, name) for r in results)
            for name, results in raw.get("recorded", {}).items()
        }
        tools = raw.get("tools")
        if tools is not None and len(set(tools)) != len(tools):
            raise ValueError(f"an agent case offers a tool twice: {tools}")
        return AgentCase(
            case_id,
            raw["input"],
            checks,
            instructions=raw.get("instructions"),
            tools=tuple(tools) if tools is not None else None,
            recorded=recorded,
            approve=tuple(raw.get("approve", ())),
            tags=tags,
        )
    if not isinstance(raw.get("question"), str) or not isinstance(raw.get("collection"), str):
        raise ValueError("a rag case needs a question and a collection")
    return RagCase(case_id, raw["question"], raw["collection"], checks, tags)


def _parse_recording(raw: Any, tool: str) -> Recording:
    if not isinstance(raw, dict) or "result" not in raw:
        raise ValueError(f"a recorded result of {tool!r} must be an object with a result")
    _no_unknown(raw, {"arguments", "result", "injected"}, f"recorded result of {tool!r}")
    return Recording(raw["result"], raw.get("arguments"), bool(raw.get("injected", False)))


def _parse_checks(raw: Mapping[str, Any], header: _Header) -> tuple[Check, ...]:
    if "checks" in raw:
        entries = raw["checks"]
        if not isinstance(entries, list) or not entries:
            raise ValueError("checks must be a non-empty list")
    elif "expected" in raw:
        if header.scorer is None:
            raise ValueError('a case with only "expected" needs a default scorer in the suite header')
        entries = [{"scorer": header.scorer, "expected": raw["expected"]}]
    else:
        raise ValueError('a case needs checks (or "expected", scored by the suite\'s scorer)')
    checks: list[Check] = []
    for entry in entries:
        if not isinstance(entry, dict) or "scorer" not in entry:
            raise ValueError('a check must be an object with a "scorer"')
        name = str(entry["scorer"])
        scorer = get_scorer(name)
        params = {
            **header.defaults.get(name, {}),
            **{k: v for k, v in entry.items() if k not in ("scorer", "metric")},
        }
        scorer.check_params(params)
        checks.append(Check(name, str(entry.get("metric", name)), params))
    metrics = [c.metric for c in checks]
    if len(set(metrics)) != len(metrics):
        raise ValueError(f"two checks of one case report the same metric: {metrics}")
    return tuple(checks)


def _check_references(suite: Suite) -> None:
    for metric in suite.thresholds:
        if metric not in suite.metrics() and metric != "success":
            raise SuiteError(suite.path, None, f"threshold for {metric!r}, which no case checks")


__all__ = [
    "SUITES_DIR",
    "AgentCase",
    "Case",
    "CaseKind",
    "ChatCase",
    "Check",
    "RagCase",
    "RagSettings",
    "Recording",
    "Suite",
    "SuiteError",
    "UnknownScorerError",
    "load_suite",
    "resolve_suite",
    "shipped_suites",
]
