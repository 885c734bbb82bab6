"""Grammar-constrained decoding: request specs, the backend interface, compiled-grammar cache, batch masks.

A request with `SamplingParams.structured_outputs` gets one grammar matcher per sequence. Each step the
engine asks the matcher which tokens may come next (a bitmask), sets the others' logits to -inf before
sampling, and advances the matcher with the sampled token. So the output can only be a string of the grammar:
a JSON schema, any JSON object, a regex, a choice list, an EBNF grammar, or a structural tag (free text with
constrained tool calls). When the grammar is complete only EOS is allowed, and the sequence stops.

Grammars compile on a small thread pool, never on the step loop: a request whose grammar is not compiled yet
waits outside the scheduler (see LLMEngine) while other requests keep decoding. Compiled grammars are cached
by content, so a schema sent with every request compiles once.

Recompute preemption keeps a sequence's tokens, so its matcher state stays valid and needs no rollback;
`GrammarMatcher.rollback` exists for speculative decoding, which un-accepts rejected proposal tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from switchyard.errors import InvalidRequestError


@dataclass(frozen=True)
class StructuredOutputsParams:
    """What the output must match; exactly one field is set (vLLM's StructuredOutputsParams, by name).

    `json` is a JSON schema (dict or its JSON text); `json_object` asks for any JSON object; `regex`, `choice`
    and `grammar` (EBNF, GBNF-style) constrain plain text; `structural_tag` is a tool-call structure in
    xgrammar's structural-tag JSON format (built by switchyard.tool_calling, rarely written by hand).
    """

    json: dict[str, Any] | str | None = None
    json_object: bool = False
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    structural_tag: dict[str, Any] | str | None = None
    strict: bool = False
    """JSON schema only: objects may not carry properties the schema does not name (OpenAI `strict`)."""
    param: str = "structured_outputs"
    """The request field that carried this spec, named in errors."""

    def __post_init__(self) -> None:
        if self.choice is not None and not isinstance(self.choice, tuple):
            object.__setattr__(self, "choice", tuple(self.choice))
        kinds = [
            k
            for k in ("json", "regex", "choice", "grammar", "structural_tag")
            if getattr(self, k) is not None
        ]
        if self.json_object:
            kinds.append("json_object")
        if len(kinds) != 1:
            raise InvalidRequestError(
                "exactly one of json, json_object, regex, choice, grammar or structural_tag must be given"
                + (f" (got {', '.join(kinds)})" if kinds else ""),
                param=self.param,
            )
        if self.choice is not None and (not self.choice or not all(isinstance(c, str) for c in self.choice)):
            raise InvalidRequestError("choice must be a non-empty list of strings", param=self.param)

    @property
    def kind(self) -> str:
        if self.json_object:
            return "json_object"
        return next(
            k
            for k in ("json", "regex", "choice", "grammar", "structural_tag")
            if getattr(self, k) is not None
        )

    @property
    def value(self) -> Any:
        return True if self.json_object else getattr(self, self.kind)

    def cache_key(self) -> str:
        """Content hash: equal specs share one compiled grammar whatever their dict key order."""
        value = self.value
        if isinstance(value, str) and self.kind in ("json", "structural_tag"):
            with contextlib.suppress(ValueError):  # compile() reports bad JSON; hash the text as is
                value = json.loads(value)
        text = json.dumps([self.kind, value, self.strict], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


class CompiledGrammar(Protocol):
    """A backend's compiled grammar: immutable, shared by every matcher made from it."""


class GrammarMatcher(Protocol):
    """One sequence's position in its grammar."""

    def accept_token(self, token_id: int) -> bool:
        """Advance by one sampled token; False (state unchanged) when the grammar forbids it."""
        ...

    def rollback(self, num_tokens: int) -> None:
        """Un-accept the last `num_tokens` tokens (speculative decoding's rejected proposals)."""
        ...

    def is_terminated(self) -> bool:
        """The grammar is complete and its stop token accepted: nothing more may be generated."""
        ...


class GrammarBackend(Protocol):
    """A grammar library behind the engine: compiles specs, makes matchers, fills and applies bitmasks."""

    name: str

    def compile(self, spec: StructuredOutputsParams) -> CompiledGrammar:
        """Compile or raise InvalidRequestError naming the problem. May run on any thread."""
        ...

    def new_matcher(self, compiled: CompiledGrammar) -> GrammarMatcher: ...

    def allocate_bitmask(self, rows: int) -> torch.Tensor: ...

    def fill_bitmask(
        self, matchers: Sequence[GrammarMatcher], bitmask: torch.Tensor, rows: list[int]
    ) -> None:
        """Write the allowed next tokens of `matchers[i]` into `bitmask[rows[i]]`."""
        ...

    def apply_bitmask(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        """Set logits[rows] of forbidden tokens to -inf, in place."""
        ...


@dataclass
class StructuredOutputStats:
    """Counters for metrics and benchmarks (cumulative since start)."""

    compiled: int = 0
    cache_hits: int = 0
    failed: int = 0
    compile_seconds: float = 0.0
    mask_seconds: float = 0.0
    masked_rows: int = 0
    reused_rows: int = 0
    """Rows of speculative verification masked with the bitmask the draft model filled for the same state."""
    rejected_tokens: int = 0
    """Sampled tokens the matcher refused: always 0 unless a backend has a bug."""
    by_kind: dict[str, int] = field(default_factory=dict)


class StructuredOutputManager:
    """Owns one backend, the compiled-grammar cache (LRU by content) and the compile thread pool."""

    def __init__(self, backend: GrammarBackend, cache_size: int = 256, compile_threads: int = 1) -> None:
        self.backend = backend
        self.cache_size = cache_size
        self._cache: OrderedDict[str, CompiledGrammar] = OrderedDict()
        self._inflight: dict[str, Future[CompiledGrammar]] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=compile_threads, thread_name_prefix="grammar-compile")
        self._bitmask: torch.Tensor | None = None
        self.stats = StructuredOutputStats()

    def compile(self, spec: StructuredOutputsParams) -> CompiledGrammar:
        """Compile now on the calling thread (or return the cached grammar); raises InvalidRequestError."""
        return self.submit(spec).result()

    def submit(self, spec: StructuredOutputsParams) -> Future[CompiledGrammar]:
        """A future of the compiled grammar; concurrent submissions of one spec share a single compile."""
        key = spec.cache_key()
        with self._lock:
            compiled = self._cache.get(key)
            if compiled is not None:
                self._cache.move_to_end(key)
                self.stats.cache_hits += 1
                done: Future[CompiledGrammar] = Future()
                done.set_result(compiled)
                return done
            future = self._inflight.get(key)
            if future is None:
                future = self._executor.submit(self._compile, key, spec)
                self._inflight[key] = future
            return future

    def _compile(self, key: str, spec: StructuredOutputsParams) -> CompiledGrammar:
        start = time.perf_counter()
        try:
            compiled = self.backend.compile(spec)
        except InvalidRequestError:
            with self._lock:
                self.stats.failed += 1
                self._inflight.pop(key, None)
            raise
        except Exception as exc:  # a backend bug or resource limit: still the request's problem, not ours
            with self._lock:
                self.stats.failed += 1
                self._inflight.pop(key, None)
            raise InvalidRequestError(
                f"could not compile the {spec.kind} grammar: {exc}", param=spec.param
            ) from exc
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            self._inflight.pop(key, None)
            self.stats.compiled += 1
            self.stats.compile_seconds += time.perf_counter() - start
            self.stats.by_kind[spec.kind] = self.stats.by_kind.get(spec.kind, 0) + 1
        return compiled

    def new_matcher(self, compiled: CompiledGrammar) -> GrammarMatcher:
        return self.backend.new_matcher(compiled)

    def mask_logits(
        self, logits: torch.Tensor, matchers: Sequence[GrammarMatcher | None], keep: bool = False
    ) -> torch.Tensor | None:
        """Forbid, in place, every token the row's matcher would refuse; rows without a matcher are untouched.
        With `keep`, returns a copy of the bitmask, row i for logits row i (meaningless where no matcher), so a
        later pass over the same grammar state can apply it without filling it again."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return None
        start = time.perf_counter()
        if self._bitmask is None or self._bitmask.shape[0] < logits.shape[0]:
            self._bitmask = self.backend.allocate_bitmask(max(64, logits.shape[0]))
        bitmask = self._bitmask
        self.backend.fill_bitmask([matchers[i] for i in rows], bitmask, rows)  # type: ignore[misc]
        self.backend.apply_bitmask(logits, bitmask, rows)
        self.stats.mask_seconds += time.perf_counter() - start
        self.stats.masked_rows += len(rows)
        return bitmask[: logits.shape[0]].clone() if keep else None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def create_backend(
    name: str, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]
) -> GrammarBackend:
    """The named backend for this tokenizer; `xgrammar` (default) or `llguidance` (optional dependency)."""
    if name == "xgrammar":
        from switchyard.engine.xgrammar_backend import XGrammarBackend

        return XGrammarBackend(tokenizer, vocab_size, stop_token_ids)
    if name == "llguidance":
        from switchyard.engine.llguidance_backend import LLGuidanceBackend

        return LLGuidanceBackend(tokenizer, vocab_size, stop_token_ids)
    raise ValueError(f"unknown structured-output backend {name!r}; choose xgrammar or llguidance")


def parse_json_schema(spec: StructuredOutputsParams) -> dict[str, Any] | bool:
    """The schema as a Python value, checked against the JSON Schema meta-schema; InvalidRequestError if not."""
    import jsonschema

    schema: Any = spec.json
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise InvalidRequestError(f"the JSON schema is not valid JSON: {exc}", param=spec.param) from exc
    if not isinstance(schema, dict | bool):
        raise InvalidRequestError("the JSON schema must be an object", param=spec.param)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise InvalidRequestError(f"invalid JSON schema at {where}: {exc.message}", param=spec.param) from exc
    return schema


def choice_ebnf(choices: Sequence[str]) -> str:
    """An EBNF grammar matching exactly one of `choices` (JSON string escapes are valid EBNF escapes)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)
