"""Drives the synchronous LLMEngine from asyncio, for the server.

Threading model: LLMEngine is not thread-safe, so every call into it (add, abort, step, and anything else that
touches engine-owned objects such as the tokenizer) runs on one dedicated worker thread, "the engine thread",
through a single-thread executor. An asyncio task (the step loop) submits `step()` to that thread while requests
are pending and awaits it, so the event loop stays free to accept connections and write tokens while the model
runs. Each step's outputs are handed to the asyncio queue of their request's `RequestStream`.

The executor runs jobs in submission order. An abort submitted while a step runs therefore takes effect before
the next step starts, which is what frees a disconnected client's KV blocks within one engine step; and an add
submitted while a step runs sees the waiting queue as that step left it, which makes admission exact.
`max_waiting` bounds the backlog: waiting requests the running batch has no room for, not the ones that
arrived during a step and will be scheduled by the next.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import math
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from switchyard.drain_rate import DrainRate, estimate_retry_after
from switchyard.engine.engine import EngineStats, LLMEngine
from switchyard.engine.grammar_limits import GrammarLimits
from switchyard.engine.kv_event_log import KVEventBatch
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import FinishReason, RequestOutput, now
from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.engine.text_worker import TextLimit, TextWorker, longest_token_chars
from switchyard.errors import CapacityError, InvalidRequestError, SwitchyardError
from switchyard.models.tokenizer import GenerationDefaults

logger = logging.getLogger(__name__)

T = TypeVar("T")


class EngineDeadError(SwitchyardError):
    """The step loop is not running: not started yet, failed, or shut down. New work cannot be accepted."""


class QueueFullError(CapacityError):
    """The waiting queue holds `max_waiting` requests; come back after `retry_after` seconds."""

    def __init__(self, num_waiting: int, retry_after: float) -> None:
        self.num_waiting = num_waiting
        super().__init__(
            f"the server is overloaded: {num_waiting} requests are already waiting; "
            f"retry in about {math.ceil(retry_after)} s",
            retry_after=retry_after,
        )


class RequestTimeoutError(SwitchyardError):
    """The request ran past its deadline (queueing included) and was aborted."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(f"the request did not finish within {timeout:g} s and was aborted")


class QueueTimeoutError(CapacityError):
    """The request waited longer than the engine's max_queue_time before being scheduled."""


class StepHungError(SwitchyardError):
    """An engine step ran past the watchdog's step timeout."""

    def __init__(self, timeout: float) -> None:
        super().__init__(f"an engine step took more than {timeout:g} s")


class RequestFailedError(SwitchyardError):
    """The engine failed this request (an error in its processing or in the step that carried it)."""


class RequestAbortedError(SwitchyardError):
    """The request was aborted by someone other than its consumer (for example a server shutdown)."""


@dataclass(frozen=True)
class StepReport:
    """What one engine step produced, for observers such as the server's metrics."""

    outputs: list[RequestOutput]
    stats: EngineStats
    num_prompt_tokens: int
    """Prompt tokens of every request admitted since the engine started (a running total)."""
    num_generated_tokens: int
    """Tokens generated since the engine started (a running total)."""
    time: float
    """time.monotonic() when the step returned."""
    has_unfinished_requests: bool


StepListener = Callable[[StepReport], None]


class RequestStream:
    """The outputs of one request, in order, as an async iterator; `async with` it to abort on early exit.

    Iteration ends after the output whose `finished` is true. It raises RequestTimeoutError past the deadline,
    RequestFailedError when the engine failed the request, RequestAbortedError when someone else aborted it,
    and EngineDeadError when the engine stopped. Cancelling the consumer while it waits aborts the request;
    leaving the `async with` block early (a client disconnect, an exception) aborts it too.
    """

    def __init__(self, engine: AsyncLLMEngine, request_id: str, timeout: float | None) -> None:
        self.request_id = request_id
        self.prompt_token_ids: list[int] = []
        """The prompt as the engine keeps it (after `truncate_prompt_tokens`); set once the request is admitted.
        Read-only: the engine's own list."""
        self._engine = engine
        self._timeout = timeout
        self._deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        self._queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._done = False

    @property
    def finished(self) -> bool:
        return self._done

    def abort(self) -> None:
        """Stop the request; its KV blocks are freed before the engine's next step. Idempotent."""
        if self._done:
            return
        self._done = True
        self._engine._forget(self.request_id)
        self._engine._submit_abort(self.request_id)

    def _push(self, item: RequestOutput | BaseException) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await self._next_item()
        except asyncio.CancelledError:
            self.abort()
            raise
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if item.finished:
            self._done = True
            if item.error is not None:
                if item.error_code == "queue_timeout":
                    raise QueueTimeoutError(item.error)
                raise RequestFailedError(item.error)
            if any(c.finish_reason == FinishReason.ABORT for c in item.outputs):
                raise RequestAbortedError("the request was aborted before it finished")
        return item

    async def _next_item(self) -> RequestOutput | BaseException:
        if self._timeout is None:
            return await self._queue.get()
        try:
            async with asyncio.timeout_at(self._deadline):
                return await self._queue.get()
        except TimeoutError:
            self.abort()
            raise RequestTimeoutError(self._timeout) from None

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort()


@dataclass(frozen=True)
class _QueueFull:
    """The engine thread's answer to an add that found `max_waiting` requests already waiting."""

    num_waiting: int


class AsyncLLMEngine:
    """An LLMEngine stepped by an asyncio task on its own thread, with bounded admission.

    Call `start()` inside the event loop that will consume the streams, and `shutdown()` before that loop ends.
    """

    @classmethod
    def built_on_its_thread(cls, build: Callable[[], LLMEngine], **options: Any) -> AsyncLLMEngine:
        """Build the engine (`build()`: load, quantize, pack) on the thread that will step it.

        PyTorch's CPU operators run on an OpenMP team per calling thread. A model loaded on the main thread and
        stepped on another leaves two teams, more OpenMP threads than cores on a small machine, and libgomp then
        stops its workers spinning between operators: every operator of a decode step waits for a sleeping
        worker to wake. Measured on 2 cores: 50 ms per int8 decode step in the server against 35 ms in-process.
        """
        executor = _engine_thread()
        try:
            engine = executor.submit(build).result()
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(engine, executor=executor, **options)

    def __init__(
        self,
        engine: LLMEngine,
        *,
        max_waiting: int = 512,
        drain_window: float = 30.0,
        max_consecutive_failures: int = 3,
        step_timeout: float | None = None,
        grammar_limits: GrammarLimits | None = None,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        if max_waiting < 1:
            raise ValueError("max_waiting must be >= 1")
        if step_timeout is not None and step_timeout <= 0:
            raise ValueError("step_timeout must be > 0 seconds")
        self.step_timeout = step_timeout
        """Seconds one engine step may take before the watchdog declares it hung and rebuilds the engine."""
        self.engine = engine
        self.max_waiting = max_waiting
        self.max_consecutive_failures = max_consecutive_failures
        """Steps that may fail in a row before the engine is declared dead (health turns 503)."""
        self._executor = executor or _engine_thread()
        self.grammar_limits = grammar_limits if grammar_limits is not None else GrammarLimits()
        """Size and compile-time bounds of a request's output constraint."""
        limit = TextLimit(engine.max_model_len, longest_token_chars(engine.tokenizer))
        self.text = TextWorker(engine.tokenizer, limit if engine.tokenizer is not None else None)
        """Chat templates and tokenization, off the engine thread so a huge prompt never stalls a step; texts
        that cannot fit the context are refused before they are tokenized."""
        self._streams: dict[str, RequestStream] = {}
        self._listeners: list[StepListener] = []
        self._drain = DrainRate(drain_window)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._dead_reason: str | None = None
        self._consecutive_failures = 0
        self.num_steps = 0

    # ------------------------------------------------------------------ facts
    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer. Use it on the engine thread (`run_in_engine_thread`) or read-only."""
        return self.engine.tokenizer

    @property
    def model_path(self) -> Path:
        """Where the served model's weights were loaded from (what /v1/models reports as its root)."""
        return self.engine.model_path

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def vocab_size(self) -> int:
        """Valid token ids are [0, vocab_size) (LLMEngine.vocab_size)."""
        return self.engine.vocab_size

    @property
    def quantization(self) -> str | None:
        """The weights' quantization method (int8, w8a8, int4) or None: /v1/models reports it."""
        return self.engine.quantization

    @property
    def generation_defaults(self) -> GenerationDefaults:
        """The model's sampling defaults (generation_config.json), used for fields a request leaves out."""
        return self.engine.generation_defaults

    @property
    def is_alive(self) -> bool:
        """True while the step loop runs and accepts work (what /health reports)."""
        return (
            self._task is not None
            and not self._task.done()
            and not self._stopping
            and self._dead_reason is None
        )

    @property
    def num_in_flight(self) -> int:
        """Requests admitted whose consumers have not seen them finish."""
        return len(self._streams)

    def add_listener(self, listener: StepListener) -> None:
        """Call `listener(report)` on the event loop after every step; its exceptions are logged, not raised."""
        self._listeners.append(listener)

    def retry_after(self, num_waiting: int) -> float:
        return estimate_retry_after(num_waiting, self._drain.per_second(now()))

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Start the step loop on the running event loop. Idempotent."""
        if self._task is not None and not self._task.done():
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stopping = False
        self._dead_reason = None
        self._task = asyncio.create_task(self._run(), name="switchyard-engine-loop")

    async def shutdown(self) -> None:
        """Stop the loop, fail what is still in flight, and release the engine thread."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        self._fail_all(EngineDeadError("the engine is shutting down"))
        with contextlib.suppress(RuntimeError):  # the executor is already shut down
            await self.run_in_engine_thread(self._abort_all_on_thread)
            await self.run_in_engine_thread(
                self.engine.close
            )  # tensor-parallel ranks, on the thread they use
        self.text.shutdown()
        self._executor.shutdown(wait=False)

    async def run_in_engine_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn on the engine thread, in order with steps; the way to touch engine-owned objects safely.

        A job queued behind a step that hung is cancelled when the watchdog replaces the thread; it is then
        submitted again to the new thread, so callers never see the swap.
        """
        job = functools.partial(fn, *args, **kwargs)
        while True:
            executor = self._executor
            future = executor.submit(job)
            try:
                return await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                replaced = future.cancelled() and executor is not self._executor
                if replaced and not (task is not None and task.cancelling()):
                    continue
                raise

    async def _compile_grammar(self, spec: StructuredOutputsParams) -> None:
        """Compile a request's grammar on the grammar pool (cached by content), off the loop and the steps.

        Raises InvalidRequestError for a grammar that does not compile, before the request is queued; the
        engine then finds the grammar cached.
        """
        limits = self.grammar_limits
        manager = await self.run_in_engine_thread(lambda: self.engine.structured_outputs)

        def checked_submit() -> concurrent.futures.Future[Any]:
            limits.check_size(spec)  # before the compile, and like it off the event loop
            return manager.submit(spec)

        compiled = asyncio.wrap_future(await asyncio.to_thread(checked_submit))
        try:
            # Shielded: the compile may be shared with other requests of the same schema, and finishing it
            # caches it for the next one.
            await asyncio.wait_for(asyncio.shield(compiled), limits.compile_timeout)
        except TimeoutError:
            raise limits.timed_out(spec) from None

    # --------------------------------------------------------------- requests
    async def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        priority: int = 0,
        tenant: str | None = None,
        timeout: float | None = None,
    ) -> RequestStream:
        """Admit a request and return its stream; raises at once if it is never going to run.

        The one call a server makes per request: its grammar (`params.structured_outputs`) is compiled here,
        on the grammar pool, before anything is queued, and the engine truncates the prompt
        (`truncate_prompt_tokens`); the stream's `prompt_token_ids` is the prompt it kept.
        Raises InvalidRequestError for a request that can never be served (a grammar that does not compile
        included), QueueFullError when `max_waiting` requests are already waiting, EngineDeadError when the
        loop is not running. `timeout` (seconds, from now, queueing included) bounds the whole request; past it
        the stream aborts the request and raises RequestTimeoutError.
        """
        self._check_alive()
        if request_id in self._streams:
            raise InvalidRequestError(f"request id {request_id!r} is already in use", param="request_id")
        stream = RequestStream(self, request_id, timeout)
        self._streams[request_id] = stream  # before the add, so no output can arrive unclaimed
        try:
            if not isinstance(prompt, str):
                self.engine.check_prompt(prompt, params)  # cheap checks before any grammar work
            if params.structured_outputs is not None:
                await self._compile_grammar(params.structured_outputs)
            admitted = await self.run_in_engine_thread(
                self._add_on_thread, request_id, prompt, params, now(), priority, tenant
            )
        except asyncio.CancelledError:
            # The add job may still run; the abort queued behind it undoes it.
            self._forget(request_id)
            self._submit_abort(request_id)
            raise
        except CapacityError as exc:  # the engine refused (KV cache full in reject mode)
            self._forget(request_id)
            if exc.retry_after is None:
                exc.retry_after = self.retry_after(max(1, self.engine.scheduler.num_waiting))
            raise
        except BaseException:
            self._forget(request_id)
            raise
        if isinstance(admitted, _QueueFull):
            self._forget(request_id)
            raise QueueFullError(admitted.num_waiting, self.retry_after(admitted.num_waiting))
        stream.prompt_token_ids = admitted
        assert self._wake is not None
        self._wake.set()
        return stream

    async def generate(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        priority: int = 0,
        tenant: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Add a request and yield its outputs; closing or cancelling the iterator early aborts it."""
        stream = await self.add_request(
            request_id, prompt, params, priority=priority, tenant=tenant, timeout=timeout
        )
        async with stream:
            async for output in stream:
                yield output

    def abort(self, request_id: str) -> None:
        """Abort a request; its consumer's stream raises RequestAbortedError."""
        stream = self._streams.pop(request_id, None)
        if stream is not None:
            stream._push(RequestAbortedError("the request was aborted before it finished"))
        self._submit_abort(request_id)

    def abort_all(self, reason: str) -> None:
        """Abort every request in flight (used after a shutdown's grace period)."""
        self._fail_all(RequestAbortedError(reason))
        with contextlib.suppress(RuntimeError):
            self._executor.submit(self._abort_all_on_thread)

    async def kv_events(
        self, after: int, epoch: str | None = None, max_events: int = 4096
    ) -> KVEventBatch | None:
        """The prefix cache's block events after sequence number `after` (engine/kv_event_log.py), read on the
        engine thread so they are consistent with the steps around them; None when prefix caching is off.

        A hung step's recovery builds a new cache with a new log, whose epoch differs: a reader still on the
        old epoch gets a snapshot."""
        return await self.run_in_engine_thread(self._kv_events_on_thread, after, epoch, max_events)

    async def wait_until_idle(self, timeout: float, poll: float = 0.05) -> bool:
        """Wait until no request is in flight; False if `timeout` seconds pass first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._streams:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(poll)
        return True

    # ------------------------------------------------------------ engine side
    def _add_on_thread(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        arrival: float,
        priority: int,
        tenant: str | None,
    ) -> list[int] | _QueueFull:
        """Runs on the engine thread; returns the prompt the engine kept, or, without adding, a full queue."""
        backlog = self.engine.scheduler.num_backlogged()  # not those the next step will schedule
        if backlog >= self.max_waiting:
            return _QueueFull(backlog)
        self.engine.add_request(
            request_id, prompt, params, arrival_time=arrival, priority=priority, tenant=tenant
        )
        return self.engine.requests[request_id].prompt_token_ids

    def _kv_events_on_thread(self, after: int, epoch: str | None, max_events: int) -> KVEventBatch | None:
        cache = self.engine.block_manager.prefix_cache
        if cache is None:
            return None
        return cache.events.read(after, epoch, cache.cached_block_hashes, max_events)

    def _step_on_thread(self) -> StepReport:
        outputs = self.engine.step()
        return StepReport(
            outputs=outputs,
            stats=self.engine.stats(),
            num_prompt_tokens=self.engine.num_prompt_tokens,
            num_generated_tokens=self.engine.num_generated_tokens,
            time=now(),
            has_unfinished_requests=self.engine.has_unfinished_requests(),
        )

    def _abort_on_thread(self, request_id: str) -> None:
        self.engine.abort_request(request_id)
        self._wake_threadsafe()

    def _abort_all_on_thread(self) -> None:
        for request_id in list(self.engine.requests):
            try:
                self.engine.abort_request(request_id)
            except Exception:  # keep freeing the others
                logger.exception("abort of request %s failed", request_id)
        self._wake_threadsafe()

    # -------------------------------------------------------------- the loop
    async def _run(self) -> None:
        assert self._loop is not None and self._wake is not None
        try:
            while not self._stopping:
                await self._wake.wait()
                # Cleared before the step is submitted: an add finishing after this point sets it again.
                self._wake.clear()
                if self._stopping:
                    break
                try:
                    report = await self._watched_step()
                except StepHungError:
                    await self._recover_from_hung_step()
                    continue
                except Exception as exc:
                    logger.exception("engine step failed")
                    await self._recover_from_failed_step(exc)
                    continue
                self._consecutive_failures = 0
                self.num_steps += 1
                self._dispatch(report)
                if report.has_unfinished_requests:
                    self._wake.set()
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                logger.exception("engine loop died")
            self._dead_reason = f"engine loop stopped: {exc!r}"
            self._fail_all(EngineDeadError(self._dead_reason))
            raise

    async def _watched_step(self) -> StepReport:
        future = asyncio.wrap_future(self._executor.submit(self._step_on_thread))
        if self.step_timeout is None:
            return await future
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.step_timeout)
        except TimeoutError:
            raise StepHungError(self.step_timeout) from None

    async def _recover_from_hung_step(self) -> None:
        """Leave the hung step's thread behind, rebuild the engine's state on a fresh thread, carry on."""
        logger.error("engine step exceeded %.1f s: rebuilding the engine on a new thread", self.step_timeout)
        stuck = self._executor
        self._executor = _engine_thread()
        stuck.shutdown(wait=False, cancel_futures=True)
        outputs = await self.run_in_engine_thread(self.engine.recover_after_hang)
        self._dispatch(
            StepReport(
                outputs=outputs,
                stats=await self.run_in_engine_thread(self.engine.stats),
                num_prompt_tokens=self.engine.num_prompt_tokens,
                num_generated_tokens=self.engine.num_generated_tokens,
                time=now(),
                has_unfinished_requests=True,
            )
        )
        assert self._wake is not None
        self._wake.set()

    async def _recover_from_failed_step(self, exc: Exception) -> None:
        """Fail every request in flight (the step may have left any of them inconsistent), free the engine."""
        self._consecutive_failures += 1
        self._fail_all(RequestFailedError(f"internal error in the engine step: {exc}"))
        try:
            await self.run_in_engine_thread(self._abort_all_on_thread)
        except Exception:
            logger.exception("could not abort requests after a failed step")
        if self._consecutive_failures >= self.max_consecutive_failures:
            self._dead_reason = f"{self._consecutive_failures} engine steps failed in a row; last: {exc!r}"
            logger.error("engine declared dead: %s", self._dead_reason)
            self._stopping = True

    def _dispatch(self, report: StepReport) -> None:
        for output in report.outputs:
            if output.finished:
                self._drain.record(report.time)
            stream = self._streams.get(output.request_id)
            if stream is None:
                continue  # its consumer is gone (aborted); nothing to deliver
            stream._push(output)
            if output.finished:
                del self._streams[output.request_id]
        for listener in self._listeners:
            try:
                listener(report)
            except Exception:
                logger.exception("step listener failed")

    # --------------------------------------------------------------- helpers
    def _check_alive(self) -> None:
        if self._dead_reason is not None:
            raise EngineDeadError(self._dead_reason)
        if not self.is_alive:
            raise EngineDeadError("the engine is not running")

    def _forget(self, request_id: str) -> None:
        self._streams.pop(request_id, None)

    def _fail_all(self, error: BaseException) -> None:
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream._push(error)

    def _submit_abort(self, request_id: str) -> None:
        with contextlib.suppress(RuntimeError):  # executor shut down: the engine and its blocks are gone
            self._executor.submit(self._abort_on_thread, request_id)

    def _wake_threadsafe(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is None or wake is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed in between
            loop.call_soon_threadsafe(wake.set)


def _engine_thread() -> ThreadPoolExecutor:
    """The single thread that runs every engine step (and, with `built_on_its_thread`, the load)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="switchyard-engine")
