"""Request and response bodies of the OpenAI-compatible API, as pydantic models.

Requests ignore fields they do not know (the OpenAI client sends new ones every release) but validate the ones
they do. Types are checked here; value ranges of sampling fields are checked once, by SamplingParams, so the two
never disagree. Normalising validators turn the API's "string or list" unions into one shape, so a type error
names the field (`stop`) instead of a union branch (`stop.list[str]`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, Protocol

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import RequestOutput, TokenLogprob
from switchyard.errors import InvalidRequestError
from switchyard.models.tokenizer import GenerationDefaults


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------ requests
def _stop_as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _content_as_text(value: Any) -> Any:
    """Message content: a string, or a list of text parts (joined); other part types are not supported."""
    if not isinstance(value, list):
        return value
    texts = []
    for part in value:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ValueError("only text content parts ({'type': 'text', 'text': ...}) are supported")
        texts.append(part["text"])
    return "".join(texts)


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


StopField = Annotated[list[str] | None, BeforeValidator(_stop_as_list)]
PromptField = Annotated[list[str | list[int]], BeforeValidator(_prompts_as_list)]


class StreamOptions(_Request):
    include_usage: bool = False
    """Send a last chunk with token usage (and `usage: null` in the others)."""
    continuous_usage_stats: bool = False
    """vLLM extra, with include_usage: every chunk also carries its choice's usage so far."""


class FunctionCall(_Request):
    name: str
    arguments: str


class ToolCall(_Request):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall

    def for_template(self) -> dict[str, Any]:
        """The call with its JSON-string arguments parsed to an object, as chat templates expect.

        Templates write `arguments | tojson` (Llama 3.1, Qwen2.5), which would quote a string a second time;
        those that accept a string test `is string` first. Arguments that are not a JSON object stay text.
        """
        call = self.model_dump()
        try:
            arguments = json.loads(self.function.arguments)
        except ValueError:
            return call
        if isinstance(arguments, dict):
            call["function"]["arguments"] = arguments
        return call


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Annotated[str | None, BeforeValidator(_content_as_text)] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None
    """An earlier reply's reasoning, as this server returns it (vLLM's name); templates that replay it (Qwen3's)
    read `reasoning_content`."""
    reasoning_content: str | None = None
    """The same, by DeepSeek's older name."""

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates expect it ("developer" is the newer name of "system")."""
        message: dict[str, Any] = {
            "role": "system" if self.role == "developer" else self.role,
            "content": self.content,
        }
        if self.name is not None:
            message["name"] = self.name
        if self.tool_calls:
            message["tool_calls"] = [call.for_template() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        reasoning = self.reasoning_content if self.reasoning_content is not None else self.reasoning
        if reasoning is not None:
            message["reasoning_content"] = message["reasoning"] = reasoning
        return message


class _ConversationFields(Protocol):
    messages: list[ChatMessage]
    add_generation_prompt: bool
    continue_final_message: bool
    chat_template_kwargs: dict[str, Any] | None
    model_fields_set: set[str]


def chat_template_options(request: _ConversationFields) -> dict[str, Any]:
    """Keyword arguments for `render_chat`: the generation prompt or a continued final message, and the
    template's extra variables. continue_final_message alone turns the generation prompt off (vLLM asks for both
    flags); asking for both explicitly is a 400."""
    generation_prompt = request.add_generation_prompt
    if request.continue_final_message:
        if generation_prompt and "add_generation_prompt" in request.model_fields_set:
            raise InvalidRequestError(
                "continue_final_message and add_generation_prompt cannot both be true: the reply either "
                "continues the final message or starts a new one",
                param="continue_final_message",
            )
        if request.messages[-1].role != "assistant":
            raise InvalidRequestError(
                "continue_final_message needs the final message to be the assistant's", param="messages"
            )
        generation_prompt = False
    return {
        "add_generation_prompt": generation_prompt,
        "continue_final_message": request.continue_final_message,
        "template_kwargs": dict(request.chat_template_kwargs or {}),
    }


class _SamplingRequest(_Request):
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
    speculative: bool = True
    """Switchyard extra: false opts this request out of speculative decoding on a server that speculates."""
    """Keep only the prompt's last k tokens (-1: as many as fit beside max_tokens)."""
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


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    """OpenAI's newer name of max_tokens; wins when both are given."""
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    """Rendered by the chat template; calls are constrained to the tools' schemas and parsed."""
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    # vLLM's chat extras
    chat_template_kwargs: dict[str, Any] | None = None
    """More variables for the chat template, e.g. {"enable_thinking": false} for Qwen3."""
    add_generation_prompt: bool = True
    """Open an assistant turn after the messages (the template's generation prompt)."""
    continue_final_message: bool = False
    """Leave the final (assistant) message open, so the reply continues its text (a prefill)."""
    include_reasoning: bool = True
    """With the server's --reasoning-parser: return the reasoning (else it is dropped from the reply)."""

    def resolved_max_tokens(self) -> int | None:
        """None: up to the context length, as OpenAI's chat API does."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def template_options(self) -> dict[str, Any]:
        return chat_template_options(self)

    def resolved_logprobs(self) -> int | None:
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidRequestError("top_logprobs needs logprobs to be true", param="top_logprobs")
        if self.top_logprobs is not None and not 0 <= self.top_logprobs <= 20:
            raise InvalidRequestError("top_logprobs must be in [0, 20]", param="top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_SamplingRequest):
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


# ----------------------------------------------------------------- responses
MIN_LOGPROB = -9999.0
"""-inf is not valid JSON; a token the sampler masked out reports this logprob instead (as vLLM does)."""


class _OmitsAbsent(_Response):
    """A response whose optional fields listed in `_omitted_when_none` are left out, not sent as null."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        fields = handler(self)
        for name in self._omitted_when_none:
            if fields.get(name) is None:
                fields.pop(name, None)
        return fields


class PromptLogprob(_Response):
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


class PromptTokensDetails(_Response):
    cached_tokens: int = 0


class CompletionTokensDetails(_Response):
    reasoning_tokens: int


class Usage(_OmitsAbsent):
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


class TopLogprob(_Response):
    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(_Response):
    content: list[ChatTokenLogprob]


class ChatResponseMessage(_Response):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None
    """With --reasoning-parser: the <think> text (vLLM's field; OpenAI's guidance for chain of thought)."""
    reasoning_content: str | None = None
    """The same text under DeepSeek's name, which many clients read."""

    @model_serializer(mode="wrap")
    def _drop_absent_reasoning(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        fields = handler(self)
        if fields.get("reasoning") is None:
            fields.pop("reasoning", None)
            fields.pop("reasoning_content", None)
        return fields


class DeltaFunctionCall(_Response):
    name: str | None = None
    arguments: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class DeltaToolCall(_Response):
    """A piece of a streamed tool call: the first has id, type and name; later ones argument text."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class ChatChoice(_Response):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None
    stop_reason: str | int | None = None
    """vLLM extra: the stop string or token id that ended the choice."""


class ChatCompletionResponse(_OmitsAbsent):
    _omitted_when_none = ("prompt_logprobs",)

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_logprobs: PromptLogprobs | None = None


class ChatDelta(_Response):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A delta carries only what changed: {"role": ...} first, {"content": ...} later, {} at the end.
        return {key: value for key, value in handler(self).items() if value is not None}


class ChatChunkChoice(_Response):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class ChatCompletionChunk(_Response):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(_Response):
    tokens: list[str]
    token_logprobs: list[float | None]
    """None only for an echoed prompt's first token, which nothing predicts."""
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(_OmitsAbsent):
    _omitted_when_none = ("prompt_logprobs",)

    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    prompt_logprobs: PromptLogprobs | None = None
    """vLLM's: the logprobs of this choice's prompt (asked with `prompt_logprobs`)."""


class CompletionResponse(_Response):
    """Both the whole response and, in a stream, each chunk (OpenAI uses one shape for the two)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(_Response):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "switchyard"
    root: str
    max_model_len: int


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(_Response):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(_Response):
    error: ErrorDetail


# ------------------------------------------------------------------ tokenizer endpoints (vLLM's)
class TokenizeRequest(_Request):
    """`POST /tokenize`: a text prompt, or messages rendered as the chat endpoint renders them."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    add_special_tokens: bool = True
    """For a text prompt: add the tokens the model's tokenizer adds (BOS), as the completions endpoint does."""
    return_token_strs: bool = False


class TokenizeResponse(_Response):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Request):
    model: str | None = None
    tokens: list[int]


class DetokenizeResponse(_Response):
    prompt: str
