"""Grammar-constrained decoding: request specs, the backend interface, compiled-grammar cache, batch masks.

A request with `SamplingParams.structured_outputs` gets one grammar matcher per sequence. Each step the
engine asks the matcher which tokens may come next (a bitmask), sets the others' logits to -inf before
sampling, and advances the matcher with the sampled token. So the output can only be a string of the grammar:
a JSON schema, any JSON object, a regex, a choice list, an EBNF grammar, or a structural tag (free text with
constrained tool calls). When the grammar is complete only EOS is allowed, and the sequence stops.

Grammars compile on a small thread pool, never on the step loop: a request whose grammar is not compiled yet
waits outside the scheduler (see LLMEngine) while other requests keep decoding. Compiled grammars are cached
by content, so a schema sent with every request compiles once.

Every compiled spec also gets an independent checker of finished outputs (`output_check.py`), built on the
compile pool and cached beside the grammar, so that a backend's approximation is caught, not returned.

Recompute preemption keeps a sequence's tokens, so its matcher state stays valid and needs no rollback;
`GrammarMatcher.rollback` exists for speculative decoding, which un-accepts rejected proposal tokens.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from switchyard.engine.structured.backend import CompiledGrammar, GrammarBackend, GrammarMatcher
from switchyard.engine.structured.output_check import OutputCheck, output_check
from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.errors import InvalidRequestError


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
    invalid_outputs: dict[tuple[str, str], int] = field(default_factory=dict)
    """Finished outputs that broke their spec, by (backend, construct): always empty unless a backend has a bug."""
    checked_outputs: int = 0


class StructuredOutputManager:
    """Owns one backend, the compiled-grammar cache (LRU by content) and the compile thread pool."""

    def __init__(self, backend: GrammarBackend, cache_size: int = 256, compile_threads: int = 1) -> None:
        self.backend = backend
        self.cache_size = cache_size
        self._cache: OrderedDict[str, CompiledGrammar] = OrderedDict()
        self._inflight: dict[str, Future[CompiledGrammar]] = {}
        self._checks: dict[str, OutputCheck | None] = {}
        """Output checkers by the same key as `_cache`, evicted with their grammar."""
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
            check = output_check(spec)
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
            self._checks[key] = check
            while len(self._cache) > self.cache_size:
                evicted, _ = self._cache.popitem(last=False)
                self._checks.pop(evicted, None)
            self._inflight.pop(key, None)
            self.stats.compiled += 1
            self.stats.compile_seconds += time.perf_counter() - start
            self.stats.by_kind[spec.kind] = self.stats.by_kind.get(spec.kind, 0) + 1
        return compiled

    def new_matcher(self, compiled: CompiledGrammar) -> GrammarMatcher:
        return self.backend.new_matcher(compiled)

    def output_check(self, spec: StructuredOutputsParams) -> OutputCheck | None:
        """The checker of `spec`'s finished outputs (built with its grammar; built now if evicted since)."""
        key = spec.cache_key()
        with self._lock:
            if key in self._checks:
                return self._checks[key]
        return output_check(spec)

    def backend_name(self, compiled: CompiledGrammar) -> str:
        """The library that compiled `compiled` (the `auto` backend routes each spec to one of two)."""
        backend_of = getattr(self.backend, "backend_of", None)
        return backend_of(compiled) if backend_of is not None else self.backend.name

    def record_invalid_output(self, backend: str, construct: str) -> None:
        key = (backend, construct)
        with self._lock:
            self.stats.invalid_outputs[key] = self.stats.invalid_outputs.get(key, 0) + 1

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
