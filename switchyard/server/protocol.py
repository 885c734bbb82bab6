"""What the OpenAI-compatible API's bodies share, as pydantic models: the request and response bases, the
sampling fields of chat and completions requests, usage, prompt logprobs, the model list and error bodies.

Requests ignore fields they do not know (the OpenAI client sends new ones every release) but validate the ones
they do. Types are checked here; value ranges of sampling fields are checked once, by SamplingParams, so the two
never disagree. Normalising validators turn the API's "string or list" unions into one shape, so a type error
names the field (`stop`) instead of a union branch (`stop.list[str]`). Each endpoint's own bodies live beside
it: chat_protocol.py, completions_protocol.py, responses_protocol.py, tokenize_protocol.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import RequestOutput, TokenLogprob
from switchyard.errors import InvalidRequestError
from switchyard.models.tokenizer import GenerationDefaults


class RequestBody(BaseModel):
    """A request body: unknown fields are ignored, known ones validated; every number finite (JSON parsers
    accept `Infinity` and `NaN`, which no sampling parameter means)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class ResponseBody(BaseModel):
    """A response body: exactly the fields it declares."""

    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------ requests
def _stop_as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


StopField = Annotated[list[str] | None, BeforeValidator(_stop_as_list)]


class StreamOptions(RequestBody):
    include_usage: bool = False
    """Send a last chunk with token usage (and `usage: null` in the others)."""
    continuous_usage_stats: bool = False
    """vLLM extra, with include_usage: every chunk also carries its choice's usage so far."""


class SamplingRequest(RequestBody):
    """Fields shared by chat and completions requests, with vLLM's extras."""

    model: str | None = None
    """Must be a served model name; omitted means the first one."""
    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    """Omitted: the model's generation_config.json default, else 1."""
    top_p: float | None = None
    seed: int | None = None
    stop: StopField = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    """Token id (as a string, as in OpenAI's API) -> bias in [-100, 100]."""
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    """Recorded as the request's tenant."""
    # vLLM extras
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    priority: int = 0
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    structured_outputs: dict[str, Any] | None = None
    """vLLM's constraint object: one of json, regex, choice, grammar, json_object."""
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    truncate_prompt_tokens: int | None = None
    """Keep only the prompt's last k tokens (-1: as many as fit beside max_tokens)."""
    speculative: bool = True
    """Switchyard extra: false opts this request out of speculative decoding on a server that speculates."""
    prompt_logprobs: int | None = None
    """vLLM's: each prompt token's logprob and rank, with this many top alternatives (not when streaming)."""
    return_tokens_as_token_ids: bool | None = None
    """Logprob entries name tokens as "token_id:N" (omitted: the server's --return-tokens-as-token-ids)."""

    def guided_fields(self) -> dict[str, Any]:
        return {
            "guided_json": self.guided_json,
            "guided_regex": self.guided_regex,
            "guided_choice": self.guided_choice,
            "guided_grammar": self.guided_grammar,
        }

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def continuous_usage(self) -> bool:
        return (
            self.include_usage
            and self.stream_options is not None
            and self.stream_options.continuous_usage_stats
        )

    def build_sampling_params(
        self, defaults: GenerationDefaults, max_tokens: int | None, logprobs: int | None
    ) -> SamplingParams:
        """The engine's SamplingParams; raises InvalidRequestError naming the offending field."""
        if self.stream_options is not None and not self.stream:
            # OpenAI's API and vLLM refuse it too: without a stream nothing would carry the options.
            raise InvalidRequestError(
                "stream_options is only allowed when stream is true", param="stream_options"
            )
        if self.stream and self.prompt_logprobs is not None:
            # As vLLM: a stream has no place for them before its first chunk.
            raise InvalidRequestError(
                "prompt_logprobs is not available when streaming", param="prompt_logprobs"
            )
        return SamplingParams(
            n=self.n,
            temperature=_first(self.temperature, defaults.temperature, 1.0),
            top_p=_first(self.top_p, defaults.top_p, 1.0),
            top_k=_first(self.top_k, defaults.top_k, 0),
            min_p=_first(self.min_p, defaults.min_p, 0.0),
            repetition_penalty=_first(self.repetition_penalty, defaults.repetition_penalty, 1.0),
            presence_penalty=_first(self.presence_penalty, 0.0),
            frequency_penalty=_first(self.frequency_penalty, 0.0),
            logit_bias=_token_bias(self.logit_bias),
            seed=self.seed,
            stop=list(self.stop or []),
            stop_token_ids=list(self.stop_token_ids or []),
            max_tokens=max_tokens,
            min_tokens=self.min_tokens,
            ignore_eos=self.ignore_eos,
            logprobs=logprobs,
            skip_special_tokens=self.skip_special_tokens,
            include_stop_str_in_output=self.include_stop_str_in_output,
            allowed_token_ids=self.allowed_token_ids,
            bad_words=list(self.bad_words or []),
            truncate_prompt_tokens=self.truncate_prompt_tokens,
            prompt_logprobs=self.prompt_logprobs,
            speculative=self.speculative,
        )


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _token_bias(bias: dict[str, float] | None) -> dict[int, float] | None:
    if not bias:
        return None
    try:
        return {int(token): value for token, value in bias.items()}
    except ValueError:
        raise InvalidRequestError("logit_bias keys must be token ids", param="logit_bias") from None


# ----------------------------------------------------------------- responses
MIN_LOGPROB = -9999.0
"""-inf is not valid JSON; a token the sampler masked out reports this logprob instead (as vLLM does)."""


class OmitsAbsent(ResponseBody):
    """A response whose optional fields listed in `_omitted_when_none` are left out, not sent as null."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        fields = handler(self)
        for name in self._omitted_when_none:
            if fields.get(name) is None:
                fields.pop(name, None)
        return fields


class PromptLogprob(ResponseBody):
    """vLLM's entry for one token at one prompt position."""

    logprob: float
    rank: int | None = None
    decoded_token: str


PromptLogprobs = list[dict[str, PromptLogprob] | None]
"""Per prompt position: token id (as a string) -> entry, holding the prompt's own token and the top
alternatives; None at the first position, which nothing predicts."""


def prompt_logprobs_of(output: RequestOutput, num_top: int, text: Callable[[int], str]) -> PromptLogprobs:
    """The `prompt_logprobs` field of a finished request that asked for them, with `num_top` alternatives."""
    entries: list[TokenLogprob | None] = list(output.prompt_logprobs or [])
    rows: PromptLogprobs = []
    for entry in entries:
        if entry is None:
            rows.append(None)
            continue
        row = {
            str(token_id): PromptLogprob(
                logprob=max(lp, MIN_LOGPROB), rank=rank, decoded_token=text(token_id)
            )
            for rank, (token_id, lp) in enumerate(entry.top[:num_top], start=1)
        }
        row[str(entry.token_id)] = PromptLogprob(
            logprob=max(entry.logprob, MIN_LOGPROB), rank=entry.rank, decoded_token=text(entry.token_id)
        )
        rows.append(row)
    return rows


class PromptTokensDetails(ResponseBody):
    cached_tokens: int = 0


class CompletionTokensDetails(ResponseBody):
    reasoning_tokens: int


class Usage(OmitsAbsent):
    _omitted_when_none = ("completion_tokens_details",)

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails | None = None
    """With --reasoning-parser: how many of the completion tokens were reasoning (OpenAI's field)."""

    @classmethod
    def so_far(cls, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Usage:
        """One choice's usage while it streams (vLLM's continuous_usage_stats)."""
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached_tokens),
        )

    @classmethod
    def of(cls, outputs: list[RequestOutput], reasoning_tokens: int | None = None) -> Usage:
        """Token counts of finished requests (several for a completions request with several prompts)."""
        prompt = sum(len(o.prompt_token_ids) for o in outputs)
        completion = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        details = (
            None if reasoning_tokens is None else CompletionTokensDetails(reasoning_tokens=reasoning_tokens)
        )
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=PromptTokensDetails(
                cached_tokens=sum(o.num_cached_tokens for o in outputs)
            ),
            completion_tokens_details=details,
        )


class ModelCard(ResponseBody):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "switchyard"
    root: str
    max_model_len: int
    quantization: str | None = None
    """The engine's weight quantization (int8, w8a8, int4), or None (unquantized)."""


class ModelList(ResponseBody):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(ResponseBody):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(ResponseBody):
    error: ErrorDetail
