"""POST /v1/chat/completions: render the conversation with the chat template, generate, answer or stream.

A stream sends, per choice, a first chunk with `delta.role = "assistant"`, then content deltas, then a chunk
with an empty delta and the finish_reason; with `stream_options.include_usage` a last chunk with no choices
carries the usage (and with vLLM's `continuous_usage_stats`, every chunk its choice's usage so far);
`data: [DONE]` ends it.

With tools (and tool_choice other than "none") decoding is constrained to the model's tool-call format (see
switchyard.tool_calling) and the reply is parsed as it streams: content goes out as `delta.content`, a call as
`delta.tool_calls` pieces (id and name first, then argument text), and finish_reason is "tool_calls".

With `--reasoning-parser`, <think> text goes out as `reasoning` (and `reasoning_content`) instead of content,
whole or as deltas (switchyard.reasoning), and tool calls are parsed from the answer after it. Whether a reply
starts inside its reasoning is read from the rendered prompt's end. A response format or tool-call grammar then
holds from the answer on (engine/reasoning_grammar.py), unless the template turned reasoning off. vLLM's chat extras `chat_template_kwargs`,
`add_generation_prompt` and `continue_final_message` reach the template.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from switchyard.engine.async_engine import RequestStream, RequestTimeoutError
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import CompletionOutput, RequestOutput, TokenLogprob
from switchyard.engine.structured.reasoning import after_reasoning
from switchyard.errors import InvalidRequestError
from switchyard.reasoning import (
    ReasoningSplitter,
    prompt_closes_reasoning,
    prompt_opens_reasoning,
    reasoning_token_count,
    split_reasoning,
)
from switchyard.server.protocol import (
    MIN_LOGPROB,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatLogprobs,
    ChatMessage,
    ChatResponseMessage,
    ChatTokenLogprob,
    DeltaFunctionCall,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
    TopLogprob,
    Usage,
    prompt_logprobs_of,
)
from switchyard.server.response_format import structured_outputs_of
from switchyard.server.state import ServerState, TokenTexts, new_id, tenant_of
from switchyard.server.streaming import event_stream_response, until_disconnected
from switchyard.tool_calling import (
    ToolCallFormat,
    ToolCallParser,
    parse_tool_choice,
    parse_tools,
    tool_call_structure,
)
from switchyard.tool_calling.format import CallStarted, ContentDelta, ParserEvent
from switchyard.tool_calling.format import ToolCall as ParsedToolCall


async def create_chat_completion(
    body: ChatCompletionRequest, state: ServerState, http_request: Request
) -> ChatCompletionResponse | Response:
    state.check_accepting()
    model = state.resolve_model(body.model)
    engine = state.engine
    params = body.build_sampling_params(
        engine.generation_defaults, body.resolved_max_tokens(), body.resolved_logprobs()
    )
    if engine.tokenizer is None:
        raise InvalidRequestError("this model has no tokenizer, so it cannot chat", param="messages")
    tools = parse_tools(body.tools)
    choice = parse_tool_choice(body.tool_choice, tools)
    tool_format = state.tool_format if choice.mode != "none" else None
    constraint = structured_outputs_of(body.response_format, body.structured_outputs, body.guided_fields())
    answer_format = constraint
    if tool_format is not None:
        constraint = tool_call_structure(
            tool_format, tools, choice, parallel=body.parallel_tool_calls, answer=answer_format
        )
    if constraint is not None:
        free_text = (
            choice.mode == "auto" and tool_format is not None and answer_format is None and bool(tools)
        )
        _check_compatible(params, whole_reply=not free_text)
    if tool_format is not None and state.tool_trigger_is_special:
        params.skip_special_tokens = False  # the trigger is a special token: the parser must see it
    prompt = await render_conversation(state, body.messages, body.tools, body.template_options())
    reasoning = None
    if state.settings.reasoning_parser is not None:
        tail = await engine.text.decode(prompt[-_PROMPT_TAIL_TOKENS:])
        reasoning = _Reasoning(opened=prompt_opens_reasoning(tail), include=body.include_reasoning)
        if state.reasoning_tags_are_special:
            params.skip_special_tokens = False  # else the splitter would never see the tags
        if constraint is not None and not prompt_closes_reasoning(tail):
            # The model reasons first, freely; the constraint holds from the answer on (and a tool-call
            # trigger inside the reasoning starts no call).
            constraint = after_reasoning(constraint, reasoning.opened)
    if constraint is not None:
        await engine.compile_grammar(constraint)  # 400 for a bad schema, before anything is queued
        params.structured_outputs = constraint
    prompt = engine.engine.truncate_prompt(prompt, params)  # so streamed usage counts what the engine keeps
    request_id = new_id("chatcmpl")
    stream = await state.admit(
        request_id, prompt, params, priority=body.priority, tenant=tenant_of(http_request, body.user)
    )
    reply = _ChatReply(
        request_id,
        model,
        int(time.time()),
        state.logprob_texts(body.return_tokens_as_token_ids),
        body.logprobs,
        tool_format,
        reasoning,
        prompt_logprobs=body.prompt_logprobs,
    )
    if body.stream:
        chunks = reply.chunks(
            stream, params.n, body.include_usage, len(prompt) if body.continuous_usage else None
        )
        return event_stream_response(chunks, [stream])
    async with stream:  # aborts the request if the client left before it finished
        return await until_disconnected(http_request, reply.collect(stream))


_PROMPT_TAIL_TOKENS = 16
"""Prompt tokens read to tell whether the template opened the reply's reasoning ("<think>\n" at its end)."""


@dataclass(frozen=True)
class _Reasoning:
    """How a request's replies split into reasoning and answer (the server's --reasoning-parser)."""

    opened: bool
    """The prompt ends inside a <think> block: replies start in their reasoning."""
    include: bool
    """The request's include_reasoning: False drops the reasoning from the reply."""


async def render_conversation(
    state: ServerState,
    messages: Sequence[ChatMessage],
    tools: list[dict[str, Any]] | None,
    options: dict[str, Any],
) -> list[int]:
    """The prompt token ids of a conversation, as the chat endpoint sends it to the engine (`options`: from
    `chat_template_options`). On the text thread: a long conversation takes seconds to tokenize, which must
    stall neither the event loop nor the engine's steps."""
    rendered = [m.for_template() for m in messages]
    if state.tool_format.template_call_id is not None:  # a template that accepts only its own call ids
        _rewrite_call_ids(rendered, state.tool_format.template_call_id)
    return await state.engine.text.render_chat(rendered, tools=tools, **options)


class _ChatReply:
    """Turns one request's engine outputs into a chat completion or its stream of chunks."""

    def __init__(
        self,
        request_id: str,
        model: str,
        created: int,
        tokens: TokenTexts,
        want_logprobs: bool,
        tool_format: ToolCallFormat | None = None,
        reasoning: _Reasoning | None = None,
        prompt_logprobs: int | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_logprobs = prompt_logprobs
        self.model = model
        self.created = created
        self.tokens = tokens
        self.want_logprobs = want_logprobs
        self.tool_format = tool_format
        self.reasoning = reasoning
        self._parsers: dict[int, ToolCallParser] = {}
        self._splitters: dict[int, ReasoningSplitter] = {}

    async def collect(self, stream: RequestStream) -> ChatCompletionResponse:
        final: RequestOutput | None = None
        async with stream:
            async for output in stream:
                final = output
        assert final is not None and final.finished
        choices = [self._choice(c) for c in sorted(final.outputs, key=lambda c: c.index)]
        return ChatCompletionResponse(
            id=self.request_id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=Usage.of([final], self._reasoning_tokens(final)),
            prompt_logprobs=None
            if self.prompt_logprobs is None
            else prompt_logprobs_of(final, self.prompt_logprobs, self.tokens.text),
        )

    def _reasoning_tokens(self, final: RequestOutput) -> int | None:
        """Completion tokens spent reasoning, over every choice; None without a reasoning parser."""
        if self.reasoning is None:
            return None
        opened = self.reasoning.opened
        return sum(reasoning_token_count(c.token_ids, self.tokens.decode, opened) for c in final.outputs)

    async def chunks(
        self, stream: RequestStream, n: int, include_usage: bool, continuous_prompt_tokens: int | None = None
    ) -> AsyncIterator[str]:
        """The SSE chunks; `continuous_prompt_tokens` (the prompt's length) puts usage on every chunk."""
        continuous = continuous_prompt_tokens is not None
        start = None if continuous_prompt_tokens is None else Usage.so_far(continuous_prompt_tokens, 0)
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
                            usage = _usage_so_far(output, completion) if continuous else None
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

    def _choice(self, completion: CompletionOutput) -> ChatChoice:
        text, thought = completion.text, None
        if self.reasoning is not None:
            split = split_reasoning(text, self.reasoning.opened)
            text, thought = split.answer, split.reasoning if self.reasoning.include else None
        content: str | None = text if text or self.reasoning is None else None
        message = ChatResponseMessage(content=content, reasoning=thought, reasoning_content=thought)
        finish_reason = completion.finish_reason
        if self.tool_format is not None:
            parsed = self.tool_format.parse(text, truncated=completion.finish_reason == "length")
            calls = [
                ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                for c in parsed.tool_calls
            ]
            message = ChatResponseMessage(
                content=parsed.content, tool_calls=calls or None, reasoning=thought, reasoning_content=thought
            )
            finish_reason = _finish_reason(finish_reason, parsed.tool_calls)
        return ChatChoice(
            index=completion.index,
            message=message,
            logprobs=self._logprobs(completion.logprobs),
            finish_reason=finish_reason,
            stop_reason=completion.stop_reason,
        )

    def _choice_chunks(self, completion: CompletionOutput, usage: Usage | None = None) -> list[str]:
        chunks = []
        index = completion.index
        logprobs = self._logprobs(completion.delta_logprobs) if completion.delta_logprobs else None
        text = completion.delta_text
        if self.reasoning is not None:
            splitter = self._splitters.setdefault(index, ReasoningSplitter(self.reasoning.opened))
            pieces = splitter.feed(text) + (splitter.finish() if completion.finish_reason is not None else [])
            text = "".join(p.text for p in pieces if not p.reasoning)
            for piece in pieces:
                if piece.reasoning and self.reasoning.include:
                    delta = ChatDelta(reasoning=piece.text, reasoning_content=piece.text)
                    choice = ChatChunkChoice(index=index, delta=delta, logprobs=logprobs)
                    chunks.append(self._chunk([choice], usage))
                    logprobs = None  # a delta's logprobs go out once, with its first chunk
        if self.tool_format is None:
            if text or logprobs is not None:
                delta = ChatDelta(content=text)
                chunks.append(
                    self._chunk([ChatChunkChoice(index=index, delta=delta, logprobs=logprobs)], usage)
                )
        else:
            parser = self._parsers.setdefault(index, self.tool_format.parser())
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
                finish_reason=_finish_reason(completion.finish_reason, parser.calls if parser else []),
                stop_reason=completion.stop_reason,
            )
            chunks.append(self._chunk([end], usage))
        return chunks

    def _chunk(self, choices: list[ChatChunkChoice], usage: Usage | None = None) -> str:
        chunk = ChatCompletionChunk(
            id=self.request_id, created=self.created, model=self.model, choices=choices, usage=usage
        )
        return chunk.model_dump_json()

    def _logprobs(self, entries: list[TokenLogprob] | None) -> ChatLogprobs | None:
        if not self.want_logprobs or entries is None:
            return None
        return ChatLogprobs(content=[self._entry(e) for e in entries])

    def _entry(self, entry: TokenLogprob) -> ChatTokenLogprob:
        tokens = self.tokens
        return ChatTokenLogprob(
            token=tokens.text(entry.token_id),
            logprob=max(entry.logprob, MIN_LOGPROB),
            bytes=tokens.bytes(entry.token_id),
            top_logprobs=[self._top(token_id, logprob) for token_id, logprob in entry.top],
        )

    def _top(self, token_id: int, logprob: float) -> TopLogprob:
        tokens = self.tokens
        return TopLogprob(
            token=tokens.text(token_id), logprob=max(logprob, MIN_LOGPROB), bytes=tokens.bytes(token_id)
        )


def _rewrite_call_ids(messages: list[dict[str, Any]], rewrite: Callable[[str], str]) -> None:
    """Call ids in the assistant's calls and in the tool results answering them, as the template wants them."""
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call.get("id"), str):
                call["id"] = rewrite(call["id"])
        if isinstance(message.get("tool_call_id"), str):
            message["tool_call_id"] = rewrite(message["tool_call_id"])


def _usage_so_far(output: RequestOutput, completion: CompletionOutput) -> Usage:
    return Usage.so_far(len(output.prompt_token_ids), len(completion.token_ids), output.num_cached_tokens)


def _finish_reason(reason: str | None, calls: Sequence[ParsedToolCall]) -> str | None:
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


def _check_compatible(params: SamplingParams, whole_reply: bool) -> None:
    """Refuse sampling fields that would end a constrained reply where its grammar does not allow an end.

    `min_tokens` forbids the end of the reply even once the grammar allows nothing else. A stop string or
    stop token can match inside the JSON (a stop string "}" in a string value) and cut it, leaving invalid
    output reported as a normal stop; this holds when the grammar covers the `whole_reply` (a response
    format, or tool_choice "required" or named), not for tool_choice "auto", whose free text may stop.
    """
    if params.min_tokens:
        raise InvalidRequestError(
            "min_tokens cannot be combined with structured outputs or tool calls: the grammar decides "
            "where the reply ends",
            param="min_tokens",
        )
    if not whole_reply:
        return
    for name in ("stop", "stop_token_ids"):
        if getattr(params, name):
            raise InvalidRequestError(
                f"{name} cannot be combined with a response format or a required tool call: it could cut "
                "the constrained output short, leaving it invalid",
                param=name,
            )


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
