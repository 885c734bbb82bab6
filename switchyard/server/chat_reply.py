"""One admitted chat request's engine outputs -> a chat completion, or its stream of typed chunks.

A stream sends, per choice, a first chunk with `delta.role = "assistant"`, then content deltas, then a chunk
with an empty delta and the finish_reason; with `stream_options.include_usage` a last chunk with no choices
carries the usage (and with vLLM's `continuous_usage_stats`, every chunk its choice's usage so far). The chunks
stay ChatCompletionChunk objects until streaming.py writes them out (or the Responses API translates them).

With a tool-call format the reply is parsed as it streams: content goes out as `delta.content`, a call as
`delta.tool_calls` pieces (id and name first, then argument text), and finish_reason is "tool_calls". With a
reasoning plan, <think> text goes out as `reasoning` (and `reasoning_content`) instead of content, whole or as
deltas (switchyard.reasoning), and tool calls are parsed from the answer after it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

from switchyard.engine.async_engine import RequestStream, RequestTimeoutError
from switchyard.engine.sequence import CompletionOutput, RequestOutput, TokenLogprob
from switchyard.reasoning import ReasoningSplitter, reasoning_token_count, split_reasoning
from switchyard.server.chat_prepare import ChatReplyPlan
from switchyard.server.chat_protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatDelta,
    ChatLogprobs,
    ChatResponseMessage,
    ChatTokenLogprob,
    DeltaFunctionCall,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
    TopLogprob,
)
from switchyard.server.protocol import MIN_LOGPROB, Usage, prompt_logprobs_of
from switchyard.tool_calling import ToolCallParser
from switchyard.tool_calling.format import CallStarted, ContentDelta, ParserEvent
from switchyard.tool_calling.format import ToolCall as ParsedToolCall


class ChatReply:
    """Turns one admitted request's stream of engine outputs into a chat completion or its chunks."""

    def __init__(
        self, request_id: str, model: str, created: int, plan: ChatReplyPlan, stream: RequestStream
    ) -> None:
        self.request_id = request_id
        self.model = model
        self.created = created
        self.plan = plan
        self.stream = stream
        """The engine request; `async with` it (or end the response that carries it) to abort on early exit."""
        self._parsers: dict[int, ToolCallParser] = {}
        self._splitters: dict[int, ReasoningSplitter] = {}

    async def collect(self) -> ChatCompletionResponse:
        """The whole completion, once the request has finished."""
        final: RequestOutput | None = None
        async with self.stream:
            async for output in self.stream:
                final = output
        assert final is not None and final.finished
        choices = [self._choice(c) for c in sorted(final.outputs, key=lambda c: c.index)]
        prompt_logprobs = self.plan.prompt_logprobs
        return ChatCompletionResponse(
            id=self.request_id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=Usage.of([final], self._reasoning_tokens(final)),
            prompt_logprobs=None
            if prompt_logprobs is None
            else prompt_logprobs_of(final, prompt_logprobs, self.plan.tokens.text),
        )

    async def chunks(
        self, include_usage: bool, continuous_usage: bool = False
    ) -> AsyncIterator[ChatCompletionChunk]:
        """The stream's chunks; `continuous_usage` puts each choice's usage so far on its chunks."""
        stream, n = self.stream, self.plan.n
        start = Usage.so_far(len(stream.prompt_token_ids), 0) if continuous_usage else None
        for index in range(n):
            role = ChatChunkChoice(index=index, delta=ChatDelta(role="assistant", content=""))
            yield self._chunk([role], usage=start)
        finished: set[int] = set()
        final: RequestOutput | None = None
        async with stream:
            try:
                async for output in stream:
                    final = output
                    for completion in output.outputs:
                        if completion.index not in finished:
                            usage = _usage_so_far(output, completion) if continuous_usage else None
                            for chunk in self._choice_chunks(completion, usage):
                                yield chunk
                        if completion.finish_reason is not None:
                            finished.add(completion.index)
            except RequestTimeoutError:
                # Close every open choice with finish_reason "error", then let the error event follow.
                for index in sorted(set(range(n)) - finished):
                    end = ChatChunkChoice(index=index, delta=ChatDelta(), finish_reason="error")
                    yield self._chunk([end])
                raise
        if include_usage and final is not None:
            yield self._chunk([], usage=Usage.of([final], self._reasoning_tokens(final)))

    def _reasoning_tokens(self, final: RequestOutput) -> int | None:
        """Completion tokens spent reasoning, over every choice; None without a reasoning parser."""
        reasoning = self.plan.reasoning
        if reasoning is None:
            return None
        decode = self.plan.tokens.decode
        return sum(reasoning_token_count(c.token_ids, decode, reasoning.opened) for c in final.outputs)

    def _choice(self, completion: CompletionOutput) -> ChatChoice:
        reasoning, tool_format = self.plan.reasoning, self.plan.tool_format
        text, thought = completion.text, None
        if reasoning is not None:
            split = split_reasoning(text, reasoning.opened)
            text, thought = split.answer, split.reasoning if reasoning.include else None
        content: str | None = text if text or reasoning is None else None
        message = ChatResponseMessage(content=content, reasoning=thought, reasoning_content=thought)
        finish_reason = completion.finish_reason
        if tool_format is not None:
            parsed = tool_format.parse(text, truncated=completion.finish_reason == "length")
            calls = [
                ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                for c in parsed.tool_calls
            ]
            message = ChatResponseMessage(
                content=parsed.content, tool_calls=calls or None, reasoning=thought, reasoning_content=thought
            )
            finish_reason = finish_reason_of(finish_reason, parsed.tool_calls)
        return ChatChoice(
            index=completion.index,
            message=message,
            logprobs=self._logprobs(completion.logprobs),
            finish_reason=finish_reason,
            stop_reason=completion.stop_reason,
        )

    def _choice_chunks(
        self, completion: CompletionOutput, usage: Usage | None = None
    ) -> list[ChatCompletionChunk]:
        reasoning, tool_format = self.plan.reasoning, self.plan.tool_format
        chunks = []
        index = completion.index
        logprobs = self._logprobs(completion.delta_logprobs) if completion.delta_logprobs else None
        text = completion.delta_text
        if reasoning is not None:
            splitter = self._splitters.setdefault(index, ReasoningSplitter(reasoning.opened))
            pieces = splitter.feed(text) + (splitter.finish() if completion.finish_reason is not None else [])
            text = "".join(p.text for p in pieces if not p.reasoning)
            for piece in pieces:
                if piece.reasoning and reasoning.include:
                    delta = ChatDelta(reasoning=piece.text, reasoning_content=piece.text)
                    choice = ChatChunkChoice(index=index, delta=delta, logprobs=logprobs)
                    chunks.append(self._chunk([choice], usage))
                    logprobs = None  # a delta's logprobs go out once, with its first chunk
        if tool_format is None:
            if text or logprobs is not None:
                delta = ChatDelta(content=text)
                chunks.append(
                    self._chunk([ChatChunkChoice(index=index, delta=delta, logprobs=logprobs)], usage)
                )
        else:
            parser = self._parsers.setdefault(index, tool_format.parser())
            events = parser.feed(text)
            if completion.finish_reason is not None:
                events += parser.finish(truncated=completion.finish_reason == "length")
            deltas = [_delta_of(event) for event in events]
            if logprobs is not None and not deltas:
                deltas = [ChatDelta(content="")]
            for position, delta in enumerate(deltas):
                attached = logprobs if position == 0 else None
                chunks.append(
                    self._chunk([ChatChunkChoice(index=index, delta=delta, logprobs=attached)], usage)
                )
        if completion.finish_reason is not None:
            parser = self._parsers.get(index)
            end = ChatChunkChoice(
                index=index,
                delta=ChatDelta(),
                finish_reason=finish_reason_of(completion.finish_reason, parser.calls if parser else []),
                stop_reason=completion.stop_reason,
            )
            chunks.append(self._chunk([end], usage))
        return chunks

    def _chunk(self, choices: list[ChatChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.request_id, created=self.created, model=self.model, choices=choices, usage=usage
        )

    def _logprobs(self, entries: list[TokenLogprob] | None) -> ChatLogprobs | None:
        if not self.plan.want_logprobs or entries is None:
            return None
        return ChatLogprobs(content=[self._entry(e) for e in entries])

    def _entry(self, entry: TokenLogprob) -> ChatTokenLogprob:
        tokens = self.plan.tokens
        return ChatTokenLogprob(
            token=tokens.text(entry.token_id),
            logprob=max(entry.logprob, MIN_LOGPROB),
            bytes=tokens.bytes(entry.token_id),
            top_logprobs=[self._top(token_id, logprob) for token_id, logprob in entry.top],
        )

    def _top(self, token_id: int, logprob: float) -> TopLogprob:
        tokens = self.plan.tokens
        return TopLogprob(
            token=tokens.text(token_id), logprob=max(logprob, MIN_LOGPROB), bytes=tokens.bytes(token_id)
        )


def finish_reason_of(reason: str | None, calls: Sequence[ParsedToolCall]) -> str | None:
    """A reply that ended normally after calling tools finishes with "tool_calls", as OpenAI's does.

    Only when every call's arguments are a whole JSON value: a stop string met inside a call (tool_choice
    "auto" keeps the request's stop strings) cuts it, and "tool_calls" would invite running it.
    """
    if reason == "stop" and calls and all(_is_json(call.arguments) for call in calls):
        return "tool_calls"
    return reason


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _usage_so_far(output: RequestOutput, completion: CompletionOutput) -> Usage:
    return Usage.so_far(len(output.prompt_token_ids), len(completion.token_ids), output.num_cached_tokens)


def _delta_of(event: ParserEvent) -> ChatDelta:
    if isinstance(event, ContentDelta):
        return ChatDelta(content=event.text)
    if isinstance(event, CallStarted):
        function = DeltaFunctionCall(name=event.name, arguments="")
        return ChatDelta(
            tool_calls=[DeltaToolCall(index=event.index, id=event.id, type="function", function=function)]
        )
    return ChatDelta(
        tool_calls=[DeltaToolCall(index=event.index, function=DeltaFunctionCall(arguments=event.text))]
    )
