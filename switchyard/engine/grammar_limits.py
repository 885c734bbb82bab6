"""Bounds on the work one output constraint may cost: its size, checked before compiling, and its compile time.

A grammar compiles in time that grows with its schema (a 20,000-property schema took 42 s), and a request
names its own schema; without bounds one client could keep the grammar pool busy for everyone. The size is
measured on the spec's canonical JSON text, a cheap pass that runs off the event loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.errors import InvalidRequestError

DEFAULT_MAX_GRAMMAR_BYTES = 256 * 1024
"""256 KiB: well above the schemas of real tool and response formats, far below what compiles for minutes."""
DEFAULT_GRAMMAR_COMPILE_TIMEOUT = 15.0
"""Seconds a request waits for its grammar to compile before it is refused."""


@dataclass(frozen=True)
class GrammarLimits:
    max_bytes: int = DEFAULT_MAX_GRAMMAR_BYTES
    """Largest constraint (JSON schema, regex, grammar, choices, tool-call structure) in UTF-8 bytes."""
    compile_timeout: float = DEFAULT_GRAMMAR_COMPILE_TIMEOUT
    """Seconds a request waits for its compile; past it, a 400 (the compile finishes in the background and is
    cached, so a retry of the same schema is served)."""

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ValueError("max_grammar_bytes must be >= 1")
        if self.compile_timeout <= 0:
            raise ValueError("grammar_compile_timeout must be > 0 seconds")

    def check_size(self, spec: StructuredOutputsParams) -> None:
        """InvalidRequestError naming the limit when the spec is larger than `max_bytes`."""
        value = spec.value
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        size = len(text.encode("utf-8", "replace"))
        if size > self.max_bytes:
            raise InvalidRequestError(
                f"the output constraint ({spec.kind}) is {size:,} bytes; this server compiles at most "
                f"{self.max_bytes:,} bytes (--max-grammar-bytes)",
                param=spec.param,
            )

    def timed_out(self, spec: StructuredOutputsParams) -> InvalidRequestError:
        return InvalidRequestError(
            f"the output constraint ({spec.kind}) did not compile within {self.compile_timeout:g} s "
            "(--grammar-compile-timeout); simplify it",
            param=spec.param,
        )
