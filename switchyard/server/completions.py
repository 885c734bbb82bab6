"""POST /v1/completions: the legacy text completion API, one engine request per prompt.

A request may carry several prompts; each becomes its own engine request and choice `i * n + j` is sample j
of prompt i, as in OpenAI's API. All prompts are admitted before anything is generated, so a bad or refused
prompt fails the whole request with nothing left running.

`echo` puts each prompt before its choices (with logprobs, the prompt tokens' logprobs too, from the engine's
prompt_logprobs), and with max_tokens 0 returns only that, which is how evaluation harnesses score a text.

Text prompts are tokenized in one trip to the text thread; `AsyncLLMEngine.add_request` is the one engine call
per prompt, which compiles the output constraint (a bad grammar is a 400 before anything is queued) and
truncates the prompt (the echo shows what it kept). Chunks stay CompletionResponse objects until
streaming.py writes them out.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import Response

from switchyard.client_disconnect import unless_disconnected, until_disconnected
from switchyard.engine.async_engine import RequestFailedError, RequestStream, RequestTimeoutError
from switchyard.engine.sequence import CompletionOutput, RequestOutput, TokenLogprob
from switchyard.errors import InvalidRequestError
from switchyard.server.completions_protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
)
from switchyard.server.errors import ClientGoneError
from switchyard.server.protocol import MIN_LOGPROB, Usage, prompt_logprobs_of
from switchyard.server.response_format import structured_outputs_of
from switchyard.server.state import ServerState, TokenTexts, check_token_ids, new_id, tenant_of
from switchyard.server.streaming import event_stream_response, merge_streams


async def create_completion(
    body: CompletionRequest, state: ServerState, http_request: Request
) -> CompletionResponse | Response:
    state.check_accepting()
    model = state.resolve_model(body.model)
    body.check_unsupported()
    # echo with max_tokens 0 scores the prompt alone: the engine generates one token, which is not shown.
    generate = not (body.echo and body.max_tokens == 0)
    max_tokens = body.max_tokens if generate else 1
    params = body.build_sampling_params(state.engine.generation_defaults, max_tokens, body.logprobs)
    if body.echo and body.logprobs is not None:
        params.prompt_logprobs = max(body.logprobs, params.prompt_logprobs or 0)
    params.structured_outputs = structured_outputs_of(None, body.structured_outputs, body.guided_fields())
    for prompt in body.prompt:  # ids checked before any decode (echo) or engine call sees them
        if not isinstance(prompt, str):
            check_token_ids(prompt, state.engine.vocab_size, "prompt")
    if body.echo and state.engine.tokenizer is None and not all(isinstance(p, str) for p in body.prompt):
        raise InvalidRequestError("echo of token-id prompts needs the model's tokenizer", param="echo")
    # Text is tokenized on the text thread, so a huge prompt never stalls the engine's steps.
    truncating = params.truncate_prompt_tokens is not None
    prompts = await unless_disconnected(
        http_request,
        state.engine.text.encode_prompts(body.prompt, truncating=truncating),
        lambda: ClientGoneError("the client disconnected"),
    )
    request_id = new_id("cmpl")
    streams: list[RequestStream] = []
    try:
        for index, token_ids in enumerate(prompts):
            streams.append(
                await state.admit(
                    f"{request_id}-{index}",
                    token_ids,
                    params,
                    priority=body.priority,
                    tenant=tenant_of(http_request, body.user),
                )
            )
        echo_texts = await _prompt_texts(state, body.prompt, prompts, streams) if body.echo else None
    except BaseException:
        for stream in streams:
            stream.abort()
        raise
    reply = _CompletionReply(
        request_id,
        model,
        int(time.time()),
        state.logprob_texts(body.return_tokens_as_token_ids),
        params.n,
        body.logprobs,
        echo_texts=echo_texts,
        generate=generate,
        prompt_logprobs=body.prompt_logprobs,
    )
    if body.stream:
        return event_stream_response(
            reply.chunks(streams, body.include_usage, body.continuous_usage), streams
        )
    try:
        return await until_disconnected(http_request, reply.collect(streams))
    finally:
        for stream in streams:  # no-op for finished ones; frees the rest if the client left
            stream.abort()


async def _prompt_texts(
    state: ServerState,
    prompts: list[str | list[int]],
    token_ids: list[list[int]],
    streams: list[RequestStream],
) -> list[str]:
    """Each prompt as text, for echo: a string as given, token ids (or what truncate_prompt_tokens kept of
    either, as its stream reports) decoded on the text thread."""
    texts = []
    for prompt, ids, stream in zip(prompts, token_ids, streams, strict=True):
        kept = stream.prompt_token_ids
        if isinstance(prompt, str) and len(kept) == len(ids):
            texts.append(prompt)
        else:
            texts.append(await state.engine.text.decode(kept))
    return texts


_Row = tuple[int, TokenLogprob | None]
"""A logprobs row: the token id and its logprob entry (None: the prompt's first token, which has none)."""


class _CompletionReply:
    """Turns the engine outputs of a request's prompts into a completion or its stream of chunks.

    With echo, each choice starts with its prompt's text (and, with logprobs, the prompt tokens' logprobs,
    the first one null as in OpenAI's API); `generate` False shows only that (echo with max_tokens 0).
    """

    def __init__(
        self,
        request_id: str,
        model: str,
        created: int,
        tokens: TokenTexts,
        n: int,
        logprobs: int | None,
        echo_texts: list[str] | None = None,
        generate: bool = True,
        prompt_logprobs: int | None = None,
    ) -> None:
        self.request_id = request_id
        self.model = model
        self.created = created
        self.tokens = tokens
        self.n = n
        self.want_logprobs = logprobs is not None
        self.echo_texts = echo_texts
        self.generate = generate
        self.prompt_logprobs = prompt_logprobs
        """vLLM's field: this many alternatives per prompt token, on every whole choice; None: not asked."""

    async def collect(self, streams: list[RequestStream]) -> CompletionResponse:
        finals: list[RequestOutput | None] = [None] * len(streams)
        async for prompt_index, output in merge_streams(streams):
            finals[prompt_index] = output
        done = [f for f in finals if f is not None]
        assert len(done) == len(streams) and all(f.finished for f in done)
        choices = [
            self._choice(prompt_index, final, c, whole=True)
            for prompt_index, final in enumerate(done)
            for c in sorted(final.outputs, key=lambda c: c.index)
        ]
        return CompletionResponse(
            id=self.request_id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=self._usage(done),
        )

    async def chunks(
        self, streams: list[RequestStream], include_usage: bool, continuous_usage: bool = False
    ) -> AsyncIterator[CompletionResponse]:
        """The stream's chunks; `continuous_usage` puts each choice's usage so far on its chunks."""
        finals: list[RequestOutput | None] = [None] * len(streams)
        started: set[int] = set()
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
                    first = index not in started
                    started.add(index)
                    choice = self._choice(
                        prompt_index,
                        output,
                        completion,
                        whole=False,
                        first=first,
                        offset=text_offsets.get(index, 0),
                    )
                    if not (choice.text or choice.logprobs or choice.finish_reason):
                        continue  # nothing new for this choice in this output
                    if choice.logprobs is not None and choice.logprobs.tokens:
                        logprobs = choice.logprobs
                        text_offsets[index] = logprobs.text_offset[-1] + len(logprobs.tokens[-1])
                    yield self._chunk(
                        [choice], self._usage_so_far(output, completion) if continuous_usage else None
                    )
        except RequestTimeoutError:
            # Close every open choice with finish_reason "error", then let the error event follow.
            for index in sorted(set(range(len(streams) * self.n)) - finished):
                yield self._chunk([CompletionChoice(index=index, text="", finish_reason="error")])
            raise
        if include_usage:
            yield self._chunk([], usage=self._usage([f for f in finals if f is not None]))

    def _choice(
        self,
        prompt_index: int,
        output: RequestOutput,
        completion: CompletionOutput,
        *,
        whole: bool,
        first: bool = True,
        offset: int = 0,
    ) -> CompletionChoice:
        """The choice of a finished completion (`whole`), or the delta of a streamed one since `offset`.

        The echoed prompt goes before the completion's `first` text."""
        text = ""
        rows: list[_Row] = []
        if self.echo_texts is not None and first:
            text = self.echo_texts[prompt_index]
            if self.want_logprobs:
                rows = _prompt_rows(output)
        if self.generate:
            text += completion.text if whole else completion.delta_text
            entries = (completion.logprobs if whole else completion.delta_logprobs) or []
            if self.want_logprobs:
                rows += [(entry.token_id, entry) for entry in entries]
        return CompletionChoice(
            index=prompt_index * self.n + completion.index,
            text=text,
            logprobs=self._logprobs(rows, offset) if self.want_logprobs and (whole or rows) else None,
            finish_reason=completion.finish_reason,
            stop_reason=completion.stop_reason,
            prompt_logprobs=prompt_logprobs_of(output, self.prompt_logprobs, self.tokens.text)
            if whole and self.prompt_logprobs is not None
            else None,
        )

    def _usage_so_far(self, output: RequestOutput, completion: CompletionOutput) -> Usage:
        generated = len(completion.token_ids) if self.generate else 0
        return Usage.so_far(len(output.prompt_token_ids), generated, output.num_cached_tokens)

    def _usage(self, finals: list[RequestOutput]) -> Usage:
        usage = Usage.of(finals)
        if self.generate:
            return usage
        return usage.model_copy(update={"completion_tokens": 0, "total_tokens": usage.prompt_tokens})

    def _chunk(self, choices: list[CompletionChoice], usage: Usage | None = None) -> CompletionResponse:
        return CompletionResponse(
            id=self.request_id, created=self.created, model=self.model, choices=choices, usage=usage
        )

    def _logprobs(self, rows: list[_Row], start_offset: int) -> CompletionLogprobs:
        tokens = [self.tokens.text(token_id) for token_id, _ in rows]
        offsets = []
        offset = start_offset
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        return CompletionLogprobs(
            tokens=tokens,
            token_logprobs=[None if e is None else max(e.logprob, MIN_LOGPROB) for _, e in rows],
            top_logprobs=[None if e is None else self._top_logprobs(e) for _, e in rows],
            text_offset=offsets,
        )

    def _top_logprobs(self, entry: TokenLogprob) -> dict[str, float]:
        """The top alternatives, best first, and always the sampled token: OpenAI's API returns up to
        `logprobs + 1` entries, and clients (lm-eval's greedy check) look the sampled token up in them."""
        top = {self.tokens.text(t): max(lp, MIN_LOGPROB) for t, lp in entry.top}
        top.setdefault(self.tokens.text(entry.token_id), max(entry.logprob, MIN_LOGPROB))
        return top


def _prompt_rows(output: RequestOutput) -> list[_Row]:
    """The prompt tokens' logprob rows; the first token has none (nothing comes before it)."""
    entries = output.prompt_logprobs
    if entries is None or any(e is None for e in entries[1:]):
        # The engine computes every prompt token of a request asking for them; a gap is an engine fault.
        raise RequestFailedError("the engine did not return logprobs for every prompt token")
    return [(token_id, None if i == 0 else entries[i]) for i, token_id in enumerate(output.prompt_token_ids)]
