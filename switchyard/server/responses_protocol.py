"""Request, response and stream-event bodies of the OpenAI Responses API (`POST /v1/responses`), as pydantic.

Only the stateless, text-and-function-tool part of the API is modelled. The request keeps `input`, `tools`,
`tool_choice` and `text` loosely typed: responses_input.py checks them item by item so an error names the exact
place (`input[2].call_id`) instead of a branch of a pydantic union.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from switchyard.server.protocol import RequestBody, ResponseBody, StopField


# ------------------------------------------------------------------ requests
class TextConfig(RequestBody):
    format: dict[str, Any] | None = None
    """`{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "name", "schema", "strict"}`."""


class ResponsesRequest(RequestBody):
    model: str | None = None
    """Must be a served model name; omitted means the first one."""
    input: Any
    """A user message as a string, or a list of input items (messages, function calls and their outputs)."""
    instructions: str | None = None
    """A system message put before the input."""
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[Any] | None = None
    """Function tools in the Responses shape: `{"type": "function", "name", "description", "parameters"}`."""
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    stream: bool = False
    metadata: dict[str, str] | None = None
    user: str | None = None
    """Recorded as the request's tenant (when API keys are off), as in chat completions."""
    store: bool | None = None
    """Only false (or omitted) is served: this server keeps no response state."""
    previous_response_id: str | None = None
    """Refused: without stored responses, send the whole conversation in `input`."""
    background: bool | None = None
    truncation: str | None = None
    include: list[str] | None = None
    # vLLM extras
    seed: int | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: StopField = None
    ignore_eos: bool = False
    priority: int = 0


# ----------------------------------------------------------------- responses
ItemStatus = Literal["in_progress", "completed", "incomplete"]
LifecycleType = Literal[
    "response.created", "response.in_progress", "response.completed", "response.incomplete"
]


class OutputText(ResponseBody):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)


class OutputMessage(ResponseBody):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: ItemStatus
    content: list[OutputText]


class FunctionCallItem(ResponseBody):
    id: str
    type: Literal["function_call"] = "function_call"
    status: ItemStatus
    call_id: str
    name: str
    arguments: str


class ReasoningText(ResponseBody):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(ResponseBody):
    """A reasoning model's <think> text (with the server's --reasoning-parser), before the answer's items."""

    id: str
    type: Literal["reasoning"] = "reasoning"
    status: ItemStatus
    summary: list[Any] = Field(default_factory=list)
    content: list[ReasoningText]


OutputItem = OutputMessage | FunctionCallItem | ReasoningItem


class InputTokensDetails(ResponseBody):
    cached_tokens: int = 0


class OutputTokensDetails(ResponseBody):
    reasoning_tokens: int = 0


class ResponseUsage(ResponseBody):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(ResponseBody):
    reason: Literal["max_output_tokens"]


class ResponseObject(ResponseBody):
    """A response as OpenAI returns it; the request's settings are echoed back, as OpenAI's are."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["in_progress", "completed", "incomplete"]
    error: None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: None = None
    store: bool = False
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any]
    tool_choice: Any
    tools: list[Any]
    truncation: Literal["disabled"] = "disabled"
    metadata: dict[str, str] | None = None
    user: str | None = None
    usage: ResponseUsage | None = None


# ------------------------------------------------------------ stream events
class ResponseEvent(ResponseBody):
    """response.created / in_progress / completed / incomplete: the response as it stands."""

    type: LifecycleType
    sequence_number: int
    response: ResponseObject


class OutputItemEvent(ResponseBody):
    type: Literal["response.output_item.added", "response.output_item.done"]
    sequence_number: int
    output_index: int
    item: OutputItem


class ContentPartEvent(ResponseBody):
    type: Literal["response.content_part.added", "response.content_part.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class TextDeltaEvent(ResponseBody):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] = Field(default_factory=list)


class TextDoneEvent(ResponseBody):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] = Field(default_factory=list)


class ArgumentsDeltaEvent(ResponseBody):
    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class ArgumentsDoneEvent(ResponseBody):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    sequence_number: int
    item_id: str
    output_index: int
    name: str
    arguments: str


class ReasoningDeltaEvent(ResponseBody):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningDoneEvent(ResponseBody):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str


StreamEvent = (
    ResponseEvent
    | ReasoningDeltaEvent
    | ReasoningDoneEvent
    | OutputItemEvent
    | ContentPartEvent
    | TextDeltaEvent
    | TextDoneEvent
    | ArgumentsDeltaEvent
    | ArgumentsDoneEvent
)
