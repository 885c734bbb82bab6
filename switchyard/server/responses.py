"""POST /v1/responses: OpenAI's Responses API, served through the chat completions path.

The request becomes the equivalent chat request (responses_input.py) and is admitted by the chat endpoint's
`start_chat`, so preparation, admission, tool-call constraints, structured outputs, metrics, timeouts and
abort-on-disconnect are the chat endpoint's own. Its reply is translated back: a chat completion into a
`response` object, the chat reply's typed chunks into Responses events (`response.created`, `response.in_progress`, then per
output item `output_item.added`, text or argument deltas and their `done` events, `output_item.done`, and last
`response.completed`, or `response.incomplete` when `max_output_tokens` cut the reply, as OpenAI's API ends).
Streamed and non-streamed responses are built by one function (`_response`), so they agree.

Stateless, like vLLM without a store: `store: true` and `previous_response_id` are refused with a 400.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import Response

from switchyard.client_disconnect import until_disconnected
from switchyard.errors import InvalidRequestError
from switchyard.server.chat import start_chat
from switchyard.server.chat_protocol import ChatCompletionChunk, ChatCompletionResponse
from switchyard.server.chat_reply import ChatReply
from switchyard.server.protocol import Usage
from switchyard.server.responses_input import chat_request_of, rename_error
from switchyard.server.responses_protocol import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    ContentPartEvent,
    FunctionCallItem,
    IncompleteDetails,
    InputTokensDetails,
    ItemStatus,
    LifecycleType,
    OutputItem,
    OutputItemEvent,
    OutputMessage,
    OutputText,
    OutputTokensDetails,
    ReasoningDeltaEvent,
    ReasoningDoneEvent,
    ReasoningItem,
    ReasoningText,
    ResponseEvent,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
    StreamEvent,
    TextDeltaEvent,
    TextDoneEvent,
)
from switchyard.server.state import ServerState
from switchyard.server.streaming import named_event_stream_response


async def create_response(body: ResponsesRequest, state: ServerState, http_request: Request) -> Response:
    """The response to `body`: JSON, or an event stream when `body.stream`; errors in Responses terms."""
    chat_request = chat_request_of(body, stream=body.stream)
    try:
        reply = await start_chat(chat_request, state, http_request)
    except InvalidRequestError as exc:
        raise rename_error(exc) from None
    if body.stream:
        events = _translated(reply, chat_request.include_usage, StreamTranslator(body))
        return named_event_stream_response(events, [reply.stream])
    async with reply.stream:  # aborts the request if the client left before it finished
        result = await until_disconnected(http_request, reply.collect())
    if not isinstance(result, ChatCompletionResponse):
        return result  # the client left before the answer (499)
    response = response_of_completion(body, result)
    return Response(content=response.model_dump_json(), media_type="application/json")


async def _translated(
    reply: ChatReply, include_usage: bool, translator: StreamTranslator
) -> AsyncIterator[StreamEvent]:
    """The chat reply's chunks, as Responses events."""
    async with contextlib.aclosing(reply.chunks(include_usage)) as chunks:
        async for chunk in chunks:
            for event in translator.feed(chunk):
                yield event


def response_of_completion(body: ResponsesRequest, completion: ChatCompletionResponse) -> ResponseObject:
    """The response a chat completion stands for: its text as a message item, then one item per call."""
    choice = completion.choices[0]
    items: list[OutputItem] = []
    content = choice.message.content or ""
    calls = choice.message.tool_calls or []
    reasoning = choice.message.reasoning
    if reasoning is not None:
        items.append(_reasoning(_item_id("rs", completion.id, 0), reasoning, "completed"))
    if content or not (calls or reasoning is not None):
        items.append(_message(_item_id("msg", completion.id, 0), content, "completed"))
    for call in calls:
        item_id = _item_id("fc", completion.id, len(items))
        function = call.function
        status = _call_status(function.arguments, "completed")
        items.append(_call(item_id, call.id, function.name, function.arguments, status))
    return _response(
        body,
        completion.id,
        completion.created,
        completion.model,
        items,
        choice.finish_reason,
        completion.usage,
    )


def _response(
    body: ResponsesRequest,
    chat_id: str,
    created: int,
    model: str,
    items: list[OutputItem],
    finish_reason: str | None,
    usage: Usage | None,
) -> ResponseObject:
    """The response object; with `finish_reason` None it is still in progress (the stream's first events)."""
    status: ItemStatus
    if finish_reason is None:
        status = "in_progress"
    elif finish_reason == "length":
        status = "incomplete"
        if items:  # the item being written when the budget ran out is the one left incomplete
            items = [*items[:-1], items[-1].model_copy(update={"status": "incomplete"})]
    else:
        status = "completed"
    text_format = body.text.format if body.text is not None and body.text.format else {"type": "text"}
    tool_choice = body.tool_choice if body.tool_choice is not None else ("auto" if body.tools else "none")
    return ResponseObject(
        id=_response_id(chat_id),
        created_at=created,
        status=status,
        incomplete_details=IncompleteDetails(reason="max_output_tokens") if status == "incomplete" else None,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        model=model,
        output=items,
        parallel_tool_calls=body.parallel_tool_calls,
        temperature=body.temperature,
        top_p=body.top_p,
        text={"format": text_format},
        tool_choice=tool_choice,
        tools=list(body.tools or []),
        metadata=body.metadata,
        user=body.user,
        usage=None if usage is None else _usage(usage),
    )


def _usage(usage: Usage) -> ResponseUsage:
    details = usage.completion_tokens_details
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=usage.prompt_tokens_details.cached_tokens),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputTokensDetails(
            reasoning_tokens=details.reasoning_tokens if details else 0
        ),
        total_tokens=usage.total_tokens,
    )


def _call_status(arguments: str, status: ItemStatus) -> ItemStatus:
    """A call whose arguments are not whole JSON (a stop string cut it) is incomplete, whatever ended the reply."""
    try:
        json.loads(arguments)
    except ValueError:
        return "incomplete"
    return status


def _response_id(chat_id: str) -> str:
    """`resp_<hex>` sharing the chat request's hex, so logs and engine request ids match the response."""
    return "resp_" + chat_id.removeprefix("chatcmpl-")


def _item_id(prefix: str, chat_id: str, index: int) -> str:
    return f"{prefix}_{chat_id.removeprefix('chatcmpl-')}_{index}"


def _message(item_id: str, text: str, status: ItemStatus) -> OutputMessage:
    return OutputMessage(id=item_id, status=status, content=[OutputText(text=text)])


def _reasoning(item_id: str, text: str, status: ItemStatus) -> ReasoningItem:
    return ReasoningItem(id=item_id, status=status, content=[ReasoningText(text=text)])


def _call(item_id: str, call_id: str, name: str, arguments: str, status: ItemStatus) -> FunctionCallItem:
    return FunctionCallItem(id=item_id, status=status, call_id=call_id, name=name, arguments=arguments)


class StreamTranslator:
    """Chat completion chunks in, Responses stream events out, with their sequence numbers.

    Output items open as the chat stream reveals them (text: a message item; a call's first piece: a
    function_call item) and close when the next one opens or the reply ends; the usage chunk, the chat stream's
    last, closes the response.
    """

    def __init__(self, body: ResponsesRequest) -> None:
        self.body = body
        self._sequence = 0
        self._chat_id = ""
        self._created = 0
        self._model = ""
        self._started = False
        self._items: list[OutputItem] = []
        self._open: OutputItem | None = None
        self._finish_reason: str | None = None

    def feed(self, chunk: ChatCompletionChunk) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            self._chat_id, self._created, self._model = chunk.id, chunk.created, chunk.model
            events.append(self._lifecycle("response.created", None))
            events.append(self._lifecycle("response.in_progress", None))
        for choice in chunk.choices:  # one choice: a Responses request has no `n`
            delta = choice.delta
            if delta.reasoning:
                events += self._reasoning(delta.reasoning)
            if delta.content:
                events += self._text(delta.content)
            for piece in delta.tool_calls or []:
                if piece.id is not None:
                    events += self._open_call(piece.id, piece.function.name or "")
                if piece.function.arguments:
                    events += self._arguments(piece.function.arguments)
            if choice.finish_reason is not None and choice.finish_reason != "error":
                self._finish_reason = choice.finish_reason
                if not self._items:  # a reply with no text and no call is still one (empty) message
                    events += self._text("")
                events += self._close("incomplete" if choice.finish_reason == "length" else "completed")
        if chunk.usage is not None and self._finish_reason is not None:
            kind: LifecycleType = (
                "response.incomplete" if self._finish_reason == "length" else "response.completed"
            )
            events.append(self._lifecycle(kind, chunk.usage))
        return events

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence - 1

    def _lifecycle(self, kind: LifecycleType, usage: Usage | None) -> ResponseEvent:
        finish = self._finish_reason if usage is not None else None
        items = list(self._items) if usage is not None else []
        response = _response(self.body, self._chat_id, self._created, self._model, items, finish, usage)
        return ResponseEvent(type=kind, sequence_number=self._next(), response=response)

    def _text(self, text: str) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if not isinstance(self._open, OutputMessage):
            events += self._close("completed")
            item = _message(_item_id("msg", self._chat_id, len(self._items)), "", "in_progress")
            events += self._add(item)
            part = ContentPartEvent(
                type="response.content_part.added",
                sequence_number=self._next(),
                item_id=item.id,
                output_index=len(self._items) - 1,
                content_index=0,
                part=OutputText(text=""),
            )
            events.append(part)
        message = self._open
        assert isinstance(message, OutputMessage)
        message.content[0].text += text
        if text:
            events.append(
                TextDeltaEvent(
                    sequence_number=self._next(),
                    item_id=message.id,
                    output_index=len(self._items) - 1,
                    content_index=0,
                    delta=text,
                )
            )
        return events

    def _reasoning(self, text: str) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if not isinstance(self._open, ReasoningItem):
            events += self._close("completed")
            events += self._add(
                _reasoning(_item_id("rs", self._chat_id, len(self._items)), "", "in_progress")
            )
        item = self._open
        assert isinstance(item, ReasoningItem)
        item.content[0].text += text
        events.append(
            ReasoningDeltaEvent(
                sequence_number=self._next(),
                item_id=item.id,
                output_index=len(self._items) - 1,
                content_index=0,
                delta=text,
            )
        )
        return events

    def _open_call(self, call_id: str, name: str) -> list[StreamEvent]:
        events = self._close("completed")
        item = _call(_item_id("fc", self._chat_id, len(self._items)), call_id, name, "", "in_progress")
        return events + self._add(item)

    def _arguments(self, text: str) -> list[StreamEvent]:
        call = self._open
        if not isinstance(call, FunctionCallItem):
            raise RuntimeError("function call arguments before the call started")
        call.arguments += text
        return [
            ArgumentsDeltaEvent(
                sequence_number=self._next(), item_id=call.id, output_index=len(self._items) - 1, delta=text
            )
        ]

    def _add(self, item: OutputItem) -> list[StreamEvent]:
        self._items.append(item)
        self._open = item
        added = OutputItemEvent(
            type="response.output_item.added",
            sequence_number=self._next(),
            output_index=len(self._items) - 1,
            item=item.model_copy(deep=True),
        )
        return [added]

    def _close(self, status: ItemStatus) -> list[StreamEvent]:
        """Done events for the open item, which ends with `status`."""
        item = self._open
        if item is None:
            return []
        self._open = None
        index = len(self._items) - 1
        item.status = _call_status(item.arguments, status) if isinstance(item, FunctionCallItem) else status
        events: list[StreamEvent] = []
        if isinstance(item, OutputMessage):
            text = item.content[0].text
            events.append(
                TextDoneEvent(
                    sequence_number=self._next(),
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    text=text,
                )
            )
            events.append(
                ContentPartEvent(
                    type="response.content_part.done",
                    sequence_number=self._next(),
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    part=OutputText(text=text),
                )
            )
        elif isinstance(item, ReasoningItem):
            events.append(
                ReasoningDoneEvent(
                    sequence_number=self._next(),
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    text=item.content[0].text,
                )
            )
        else:
            events.append(
                ArgumentsDoneEvent(
                    sequence_number=self._next(),
                    item_id=item.id,
                    output_index=index,
                    name=item.name,
                    arguments=item.arguments,
                )
            )
        events.append(
            OutputItemEvent(
                type="response.output_item.done",
                sequence_number=self._next(),
                output_index=index,
                item=item.model_copy(deep=True),
            )
        )
        return events
