"""POST /v1/completions: the legacy text completion API, one engine request per prompt.

A request may carry several prompts; each becomes its own engine request and choice `i * n + j` is sample j
of prompt i, as in OpenAI's API. All prompts are admitted before anything is generated, so a bad or refused
prompt fails the whole request with nothing left running.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import Response

from switchyard.engine.async_engine import RequestStream, RequestTimeoutError
from switchyard.engine.sequence import CompletionOutput, RequestOutput, TokenLogprob
from switchyard.server.protocol import (
    MIN_LOGPROB,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    Usage,
)
from switchyard.server.response_format import structured_outputs_of
from switchyard.server.state import ServerState, TokenTexts, new_id, tenant_of
from switchyard.server.streaming import event_stream_response, merge_streams, until_disconnected


async def create_completion(
    body: CompletionRequest, state: ServerState, http_request: Request
) -> CompletionResponse | Response:
    state.check_accepting()
    model = state.resolve_model(body.model)
    body.check_unsupported()
    params = body.build_sampling_params(state.engine.generation_defaults, body.max_tokens, body.logprobs)
    constraint = structured_outputs_of(None, body.structured_outputs, body.guided_fields())
    if constraint is not None:
        await state.engine.compile_grammar(constraint)  # 400 for a bad grammar, before anything is queued
        params.structured_outputs = constraint
    request_id = new_id("cmpl")
    streams: list[RequestStream] = []
    try:
        for index, prompt in enumerate(body.prompt):
            streams.append(
                await state.admit(
                    f"{request_id}-{index}",
                    prompt,
                    params,
                    priority=body.priority,
                    tenant=tenant_of(http_request, body.user),
                )
            )
    except BaseException:
        for stream in streams:
            stream.abort()
        raise
    reply = _CompletionReply(request_id, model, int(time.time()), state.token_texts, params.n, body.logprobs)
    if body.stream:
        return event_stream_response(reply.chunks(streams, body.include_usage), streams)
    try:
        return await until_disconnected(http_request, reply.collect(streams))
    finally:
        for stream in streams:  # no-op for finished ones; frees the rest if the client left
            stream.abort()


class _CompletionReply:
    """Turns the engine outputs of a request's prompts into a completion or its stream of chunks."""

    def __init__(
        self, request_id: str, model: str, created: int, tokens: TokenTexts, n: int, logprobs: int | None
    ) -> None:
        self.request_id = request_id
        self.model = model
        self.created = created
        self.tokens = tokens
        self.n = n
        self.want_logprobs = logprobs is not None

    async def collect(self, streams: list[RequestStream]) -> CompletionResponse:
        finals: list[RequestOutput | None] = [None] * len(streams)
        async for prompt_index, output in merge_streams(streams):
            finals[prompt_index] = output
        done = [f for f in finals if f is not None]
        assert len(done) == len(streams) and all(f.finished for f in done)
        choices = [
            CompletionChoice(
                index=prompt_index * self.n + c.index,
                text=c.text,
                logprobs=self._logprobs(c.logprobs, 0),
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
            )
            for prompt_index, final in enumerate(done)
            for c in sorted(final.outputs, key=lambda c: c.index)
        ]
        return CompletionResponse(
            id=self.request_id, created=self.created, model=self.model, choices=choices, usage=Usage.of(done)
        )

    async def chunks(self, streams: list[RequestStream], include_usage: bool) -> AsyncIterator[str]:
        finals: list[RequestOutput | None] = [None] * len(streams)
        finished: set[int] = set()
        text_offsets: dict[int, int] = {}
        try:
            async for prompt_index, output in merge_streams(streams):
                finals[prompt_index] = output
                for completion in output.outputs:
                    index = prompt_index * self.n + completion.index
                    if index in finished:
                        continue  # later outputs of its request only repeat that this choice ended
                    if completion.finish_reason is not None:
                        finished.add(index)
                    choice = self._delta_choice(index, completion, text_offsets.get(index, 0))
                    if choice is None:
                        continue
                    if choice.logprobs is not None:
                        logprobs = choice.logprobs
                        text_offsets[index] = logprobs.text_offset[-1] + len(logprobs.tokens[-1])
                    yield self._chunk([choice])
        except RequestTimeoutError:
            # Close every open choice with finish_reason "error", then let the error event follow.
            for index in sorted(set(range(len(streams) * self.n)) - finished):
                yield self._chunk([CompletionChoice(index=index, text="", finish_reason="error")])
            raise
        if include_usage:
            yield self._chunk([], usage=Usage.of([f for f in finals if f is not None]))

    def _delta_choice(
        self, index: int, completion: CompletionOutput, text_offset: int
    ) -> CompletionChoice | None:
        has_logprobs = self.want_logprobs and bool(completion.delta_logprobs)
        if not completion.delta_text and not has_logprobs and completion.finish_reason is None:
            return None
        return CompletionChoice(
            index=index,
            text=completion.delta_text,
            logprobs=self._logprobs(completion.delta_logprobs, text_offset) if has_logprobs else None,
            finish_reason=completion.finish_reason,
            stop_reason=completion.stop_reason,
        )

    def _chunk(self, choices: list[CompletionChoice], usage: Usage | None = None) -> str:
        chunk = CompletionResponse(
            id=self.request_id, created=self.created, model=self.model, choices=choices, usage=usage
        )
        return chunk.model_dump_json()

    def _logprobs(self, entries: list[TokenLogprob] | None, start_offset: int) -> CompletionLogprobs | None:
        if not self.want_logprobs or entries is None:
            return None
        tokens = [self.tokens.text(e.token_id) for e in entries]
        offsets = []
        offset = start_offset
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        return CompletionLogprobs(
            tokens=tokens,
            token_logprobs=[max(e.logprob, MIN_LOGPROB) for e in entries],
            top_logprobs=[{self.tokens.text(t): max(lp, MIN_LOGPROB) for t, lp in e.top} for e in entries],
            text_offset=offsets,
        )
