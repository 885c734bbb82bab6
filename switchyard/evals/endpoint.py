"""The system under test: an OpenAI-compatible endpoint and the model name to send, reached with the official
`openai` client (Switchyard's server, vLLM, a hosted API: anything that speaks the API)."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.extras import require_extra

with require_extra("evals"):
    import openai


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    """The API root, /v1 included."""
    model: str
    api_key: str = "unused"
    timeout: float = 600.0
    """Seconds one request may take (an agent case makes several)."""

    def client(self) -> openai.AsyncOpenAI:
        """A client with no retries: a failed case is recorded as an error and retried on resume instead."""
        return openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key, timeout=self.timeout, max_retries=0
        )


@dataclass(frozen=True)
class Prices:
    """US dollars per million tokens, for each case's cost (0 for a local model, unless told)."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_million + output_tokens * self.output_per_million) / 1e6
