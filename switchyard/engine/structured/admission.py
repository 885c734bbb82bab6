"""Structured outputs at the engine's door: the grammar manager, built on first use (it indexes the
vocabulary), and the requests held outside the scheduler while their grammar compiles.

Grammars compile on the manager's thread pool, never on the step loop. A request whose grammar is ready at
admission (a cached one) is scheduled at once; the others wait here until `take_ready` hands them back, while
other requests keep decoding.
"""

from __future__ import annotations

from collections.abc import KeysView, Sequence
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING

from switchyard.engine.sequence import Request, SequenceStatus
from switchyard.engine.structured.backend import CompiledGrammar, GrammarMatcher, create_backend
from switchyard.engine.structured.manager import StructuredOutputManager
from switchyard.errors import InvalidRequestError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class GrammarAdmission:
    def __init__(
        self,
        backend: str,
        tokenizer: PreTrainedTokenizerBase | None,
        vocab_size: int,
        eos_token_ids: Sequence[int],
    ) -> None:
        """`backend`: the grammar library's name (`create_backend`)."""
        self.backend = backend
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.built: StructuredOutputManager | None = None
        """The manager once some request needed it (None: no grammar so far, no mask to apply)."""
        self._waiting: dict[str, tuple[Request, Future[CompiledGrammar]]] = {}

    @property
    def manager(self) -> StructuredOutputManager:
        """The grammar backend and compiled-grammar cache; InvalidRequestError without a tokenizer."""
        if self.built is None:
            if self.tokenizer is None:
                raise InvalidRequestError(
                    "structured outputs need a tokenizer; this engine has none", param="structured_outputs"
                )
            backend = create_backend(self.backend, self.tokenizer, self.vocab_size, self.eos_token_ids)
            self.built = StructuredOutputManager(backend)
        return self.built

    @property
    def waiting_ids(self) -> KeysView[str]:
        """Requests whose grammar is compiling."""
        return self._waiting.keys()

    def admit(self, request: Request) -> bool:
        """Submit the request's grammar, if it has one. Ready (or none): its sequences get their matchers and
        True comes back; a grammar that failed to compile raises InvalidRequestError. Still compiling: the
        request waits here, and False comes back."""
        spec = request.params.structured_outputs
        if spec is None:
            return True
        future = self.manager.submit(spec)
        if future.done():
            self._attach(request, future.result())
            return True
        for seq in request.sequences:
            seq.status = SequenceStatus.AWAITING_GRAMMAR
        self._waiting[request.request_id] = (request, future)
        return False

    def take_ready(self) -> tuple[list[Request], list[tuple[Request, Exception]]]:
        """The waiting requests whose grammar has compiled (their sequences have matchers now), and those
        whose grammar failed to compile, with the error."""
        ready: list[Request] = []
        failed: list[tuple[Request, Exception]] = []
        for request_id, (request, future) in list(self._waiting.items()):
            if not future.done():
                continue
            del self._waiting[request_id]
            try:
                compiled = future.result()
            except Exception as exc:
                failed.append((request, exc))
                continue
            self._attach(request, compiled)
            ready.append(request)
        return ready, failed

    def wait(self, timeout: float) -> None:
        """Block until some waiting grammar has compiled, or `timeout` seconds."""
        pending = [future for _, future in self._waiting.values()]
        wait_futures(pending, timeout=timeout, return_when=FIRST_COMPLETED)

    def discard(self, request_id: str) -> None:
        self._waiting.pop(request_id, None)

    def matcher(self, request: Request) -> GrammarMatcher | None:
        """A fresh matcher of the request's compiled grammar (None: unconstrained)."""
        if request.compiled_grammar is None:
            return None
        return self.manager.new_matcher(request.compiled_grammar)

    def _attach(self, request: Request, compiled: CompiledGrammar) -> None:
        request.compiled_grammar = compiled
        spec = request.params.structured_outputs
        request.output_check = self.manager.output_check(spec) if spec is not None else None
        for seq in request.sequences:
            seq.grammar = self.matcher(request)
