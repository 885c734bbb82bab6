"""Request, response and chunk bodies of `POST /v1/chat/completions`, as pydantic models."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Protocol

from pydantic import BeforeValidator, Field, SerializerFunctionWrapHandler, model_serializer

from switchyard.errors import InvalidRequestError
from switchyard.server.protocol import (
    OmitsAbsent,
    PromptLogprobs,
    RequestBody,
    ResponseBody,
    SamplingRequest,
    Usage,
)


# ------------------------------------------------------------------ requests
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


class FunctionCall(RequestBody):
    name: str
    arguments: str


class ToolCall(RequestBody):
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


class ChatMessage(RequestBody):
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


class ChatCompletionRequest(SamplingRequest):
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


# ----------------------------------------------------------------- responses
class TopLogprob(ResponseBody):
    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(ResponseBody):
    content: list[ChatTokenLogprob]


class ChatResponseMessage(ResponseBody):
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


class DeltaFunctionCall(ResponseBody):
    name: str | None = None
    arguments: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class DeltaToolCall(ResponseBody):
    """A piece of a streamed tool call: the first has id, type and name; later ones argument text."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class ChatChoice(ResponseBody):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None
    stop_reason: str | int | None = None
    """vLLM extra: the stop string or token id that ended the choice."""


class ChatCompletionResponse(OmitsAbsent):
    _omitted_when_none = ("prompt_logprobs",)

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_logprobs: PromptLogprobs | None = None


class ChatDelta(ResponseBody):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A delta carries only what changed: {"role": ...} first, {"content": ...} later, {} at the end.
        return {key: value for key, value in handler(self).items() if value is not None}


class ChatChunkChoice(ResponseBody):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class ChatCompletionChunk(ResponseBody):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
