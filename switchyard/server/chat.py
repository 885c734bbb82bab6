"""POST /v1/chat/completions: render the conversation with the chat template, generate, answer or stream.

A stream sends, per choice, a first chunk with `delta.role = "assistant"`, then content deltas, then a chunk
with an empty delta and the finish_reason; with `stream_options.include_usage` a last chunk with no choices
carries the usage; `data: [DONE]` ends it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import Response

from switchyard.engine.async_engine import RequestStream, RequestTimeoutError
from switchyard.engine.sequence import CompletionOutput, RequestOutput, TokenLogprob
from switchyard.errors import InvalidRequestError
from switchyard.models.tokenizer import render_chat
from switchyard.server.protocol import (
    MIN_LOGPROB,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatLogprobs,
    ChatResponseMessage,
    ChatTokenLogprob,
    TopLogprob,
    Usage,
)
from switchyard.server.state import ServerState, TokenTexts, new_id, tenant_of
from switchyard.server.streaming import event_stream_response, until_disconnected


async def create_chat_completion(
    body: ChatCompletionRequest, state: ServerState, http_request: Request
) -> ChatCompletionResponse | Response:
    state.check_accepting()
    model = state.resolve_model(body.model)
    body.check_unsupported()
    engine = state.engine
    params = body.build_sampling_params(
        engine.generation_defaults, body.resolved_max_tokens(), body.resolved_logprobs()
    )
    if engine.tokenizer is None:
        raise InvalidRequestError("this model has no tokenizer, so it cannot chat", param="messages")
    messages = [m.for_template() for m in body.messages]
    # On the engine thread: the tokenizer is the engine's, and this keeps the event loop free.
    prompt = await engine.run_in_engine_thread(render_chat, engine.tokenizer, messages, tools=body.tools)
    request_id = new_id("chatcmpl")
    stream = await state.admit(
        request_id, prompt, params, priority=body.priority, tenant=tenant_of(http_request, body.user)
    )
    reply = _ChatReply(request_id, model, int(time.time()), state.token_texts, body.logprobs)
    if body.stream:
        return event_stream_response(reply.chunks(stream, params.n, body.include_usage), [stream])
    async with stream:  # aborts the request if the client left before it finished
        return await until_disconnected(http_request, reply.collect(stream))


class _ChatReply:
    """Turns one request's engine outputs into a chat completion or its stream of chunks."""

    def __init__(
        self, request_id: str, model: str, created: int, tokens: TokenTexts, want_logprobs: bool
    ) -> None:
        self.request_id = request_id
        self.model = model
        self.created = created
        self.tokens = tokens
        self.want_logprobs = want_logprobs

    async def collect(self, stream: RequestStream) -> ChatCompletionResponse:
        final: RequestOutput | None = None
        async with stream:
            async for output in stream:
                final = output
        assert final is not None and final.finished
        choices = [
            ChatChoice(
                index=c.index,
                message=ChatResponseMessage(content=c.text),
                logprobs=self._logprobs(c.logprobs),
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
            )
            for c in sorted(final.outputs, key=lambda c: c.index)
        ]
        return ChatCompletionResponse(
            id=self.request_id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=Usage.of([final]),
        )

    async def chunks(self, stream: RequestStream, n: int, include_usage: bool) -> AsyncIterator[str]:
        for index in range(n):
            yield self._chunk([ChatChunkChoice(index=index, delta=ChatDelta(role="assistant", content=""))])
        finished: set[int] = set()
        final: RequestOutput | None = None
        async with stream:
            try:
                async for output in stream:
                    final = output
                    for completion in output.outputs:
                        if completion.index not in finished:
                            for chunk in self._choice_chunks(completion):
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
            yield self._chunk([], usage=Usage.of([final]))

    def _choice_chunks(self, completion: CompletionOutput) -> list[str]:
        chunks = []
        logprobs = self._logprobs(completion.delta_logprobs) if completion.delta_logprobs else None
        if completion.delta_text or logprobs is not None:
            delta = ChatDelta(content=completion.delta_text)
            chunks.append(
                self._chunk([ChatChunkChoice(index=completion.index, delta=delta, logprobs=logprobs)])
            )
        if completion.finish_reason is not None:
            end = ChatChunkChoice(
                index=completion.index,
                delta=ChatDelta(),
                finish_reason=completion.finish_reason,
                stop_reason=completion.stop_reason,
            )
            chunks.append(self._chunk([end]))
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
