"""The Responses translator on scripted chat chunks: the streamed events and the final response of replies a
random model seldom writes on its own (text then a cut call, an empty reply)."""

from __future__ import annotations

from typing import Any

from harness import MODEL
from test_responses import TOOLS

from switchyard.server.chat_protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatDelta,
    ChatResponseMessage,
    DeltaFunctionCall,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
)
from switchyard.server.protocol import Usage
from switchyard.server.responses import StreamTranslator, response_of_completion
from switchyard.server.responses_protocol import ResponsesRequest


def chunk(
    delta: ChatDelta | None = None, finish: str | None = None, usage: Usage | None = None
) -> ChatCompletionChunk:
    choices = [] if delta is None else [ChatChunkChoice(index=0, delta=delta, finish_reason=finish)]
    return ChatCompletionChunk(id="chatcmpl-abc", created=7, model=MODEL, choices=choices, usage=usage)


def call_piece(**fields: Any) -> ChatDelta:
    arguments = fields.pop("arguments", None)
    name = fields.pop("name", None)
    function = DeltaFunctionCall(name=name, arguments=arguments)
    return ChatDelta(tool_calls=[DeltaToolCall(index=fields.pop("index", 0), function=function, **fields)])


def test_translator_text_then_a_cut_call_matches_the_whole_response() -> None:
    """Text and then a call (tool_choice auto) whose arguments a stop string cut: the call is incomplete.

    A random model seldom writes this on its own, so the chat chunks are scripted; the non-streamed response
    of the same chat reply must equal the stream's final one exactly (ids derive from the chat id).
    """
    body = ResponsesRequest(input="hi", tools=TOOLS)
    usage = Usage.so_far(11, 6)
    chunks = [
        chunk(ChatDelta(role="assistant", content="")),
        chunk(ChatDelta(content="Let me ")),
        chunk(ChatDelta(content="see.")),
        chunk(call_piece(id="call_1", type="function", name="add", arguments="")),
        chunk(call_piece(arguments='{"a": ')),
        chunk(call_piece(arguments="1")),
        chunk(ChatDelta(), finish="stop"),
        chunk(usage=usage),
    ]
    translator = StreamTranslator(body)
    events = [event for c in chunks for event in translator.feed(c)]
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.output_index for e in events if e.type == "response.output_item.done"] == [0, 1]
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed" and final.usage is not None and final.usage.input_tokens == 11
    message, call = final.output
    assert message.content[0].text == "Let me see." and message.status == "completed"
    assert call.arguments == '{"a": 1' and call.status == "incomplete"
    whole = ChatCompletionResponse(
        id="chatcmpl-abc",
        created=7,
        model=MODEL,
        choices=[
            ChatChoice(
                index=0,
                message=ChatResponseMessage(
                    content="Let me see.",
                    tool_calls=[
                        ToolCall(id="call_1", function=FunctionCall(name="add", arguments='{"a": 1'))
                    ],
                ),
                finish_reason="stop",
            )
        ],
        usage=usage,
    )
    assert response_of_completion(body, whole) == final


def test_translator_empty_reply_is_one_empty_message() -> None:
    translator = StreamTranslator(ResponsesRequest(input="hi"))
    events = [
        e
        for c in [
            chunk(ChatDelta(role="assistant", content="")),
            chunk(ChatDelta(), finish="stop"),
            chunk(usage=Usage.so_far(3, 1)),
        ]
        for e in translator.feed(c)
    ]
    final = events[-1].response  # type: ignore[union-attr]
    assert [item.type for item in final.output] == ["message"] and final.output[0].content[0].text == ""
    assert "response.output_text.delta" not in [e.type for e in events]
