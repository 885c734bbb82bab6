"""Request and response bodies of `POST /v1/completions`, as pydantic models (a stream's chunks share the
response's shape)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from switchyard.errors import InvalidRequestError
from switchyard.server.protocol import (
    OmitsAbsent,
    PromptLogprobs,
    ResponseBody,
    SamplingRequest,
    Usage,
)


def _prompts_as_list(value: Any) -> Any:
    """A string, a list of strings, a token list, or a list of token lists -> a list of prompts."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(_is_int(v) for v in value):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, list) and all(_is_int(t) for t in v) for v in value)
    ):
        return value
    raise ValueError(
        "prompt must be a non-empty string, list of strings, list of token ids, or list of token id lists"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


PromptField = Annotated[list[str | list[int]], BeforeValidator(_prompts_as_list)]


class CompletionRequest(SamplingRequest):
    prompt: PromptField
    max_tokens: int | None = 16
    """16 when omitted, as in OpenAI's completions API; null means up to the context length."""
    logprobs: int | None = None
    """Number of top alternatives per token (0 = only the sampled token's logprob)."""
    echo: bool = False
    """Put the prompt before each choice's text (and its tokens' logprobs before the choice's, when asked);
    with max_tokens 0, return only that: how evaluation harnesses score a text's likelihood."""
    suffix: str | None = None
    best_of: int | None = None

    def check_unsupported(self) -> None:
        if self.suffix:
            raise InvalidRequestError("suffix is not supported", param="suffix")
        if self.best_of is not None and self.best_of != self.n:
            raise InvalidRequestError("best_of other than n is not supported", param="best_of")


class CompletionLogprobs(ResponseBody):
    tokens: list[str]
    token_logprobs: list[float | None]
    """None only for an echoed prompt's first token, which nothing predicts."""
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(OmitsAbsent):
    _omitted_when_none = ("prompt_logprobs",)

    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    prompt_logprobs: PromptLogprobs | None = None
    """vLLM's: the logprobs of this choice's prompt (asked with `prompt_logprobs`)."""


class CompletionResponse(ResponseBody):
    """Both the whole response and, in a stream, each chunk (OpenAI uses one shape for the two)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
