"""One request's way through the gateway: admission, the policy's choice, the attempt, retries elsewhere.

The body goes to the replica as the client sent it. An attempt that fails before the client has received a
byte (no connection, a timeout, a 5xx or a 429, or a stream that broke before its first event) is retried on a
replica not yet tried, up to `max_attempts`; a 4xx other than 429 is the request's fault and goes straight
back. When every attempt was refused, the client gets the last 429 (with its Retry-After), else the last 5xx,
else 503 with Retry-After. Once a byte has gone out, the stream is the client's (see relay.py).

Requests go to the replicas through aiohttp, whose C HTTP parser reads a stream's events for about a fifth of
the CPU httpx spends on them (benchmarks/gateway_overhead.py); httpx stays for the gateway's other calls
(health checks, /tokenize, KV events), which are few.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import aiohttp
import httpx
from fastapi.responses import Response

from switchyard.fleet.admission import DEFAULT_TENANT
from switchyard.fleet.errors import NoHealthyReplicaError, QueueFullError, describe
from switchyard.fleet.forwarded_headers import REQUEST_ID_HEADER, downstream_headers
from switchyard.fleet.metrics import NO_REPLICA, FleetMetrics
from switchyard.fleet.policies import RouteDecision, RouteRequest
from switchyard.fleet.pool import Pool
from switchyard.fleet.queued_prefill import QueuedPrefill
from switchyard.fleet.relay import EventFramer, RelayedStream, StreamEnd, StreamOutcome, release
from switchyard.fleet.replica import Replica
from switchyard.fleet.request_fields import RequestFields
from switchyard.fleet.usage import cached_tokens_in_body

logger = logging.getLogger(__name__)

ENDPOINT_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
}
EJECTING_STATUSES = frozenset({502, 503, 504})
"""Replica answers that count against its circuit breaker: it is unavailable or overwhelmed. A 500 may be
the request's own fault, so it is retried elsewhere but does not eject the replica."""


@dataclass(frozen=True)
class ProxyCall:
    """A request on its way: what the client sent, and the headers to send on."""

    endpoint: str
    """`chat`, `completions` or `responses` (ENDPOINT_PATHS)."""
    body: bytes
    fields: RequestFields
    headers: list[tuple[str, str]]
    request_id: str
    tenant: str = DEFAULT_TENANT
    """Whom the request waits as when the pool's replicas are full (admission.py)."""
    weight: float = 1.0
    """The tenant's fair-share weight."""

    @property
    def named_events(self) -> bool:
        """The Responses API streams named events (`event: ...`), and its errors as `event: error`."""
        return self.endpoint == "responses"


@dataclass(frozen=True)
class _Refusal:
    """A replica's 429 or 5xx answer, kept to pass on if no other replica does better."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class _Failure:
    reason: str
    """connect_error, timeout, read_error, 429 or 5xx (the retries metric's label)."""
    refusal: _Refusal | None = None


class Proxy:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        client: httpx.AsyncClient,
        metrics: FleetMetrics,
        max_attempts: int,
        tokenize_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`session` carries the requests to replicas; `client` asks a replica to count a prompt's tokens."""
        self._session = session
        self._client = client
        self._metrics = metrics
        self._max_attempts = max_attempts
        self._tokenize_timeout = tokenize_timeout
        self._clock = clock

    async def forward(self, pool: Pool, call: ProxyCall) -> Response:
        """The client's response; QueueFullError (429) or NoHealthyReplicaError (503) when the gateway answers."""
        arrived = self._clock()
        route = call.fields.route
        if pool.policy.needs_tokens:
            route = await self._with_tokens(pool, call, route)
        try:
            await pool.admit(call.tenant, call.weight)
        except (QueueFullError, NoHealthyReplicaError) as exc:
            reason = "queue_full" if isinstance(exc, QueueFullError) else "no_replica"
            self._observe_refused(pool, reason, exc, arrived)
            raise
        return await self._attempts(pool, call, route, arrived)

    async def _attempts(self, pool: Pool, call: ProxyCall, route: RouteRequest, arrived: float) -> Response:
        tried: list[Replica] = []
        last_429: _Refusal | None = None
        last_5xx: _Refusal | None = None
        failed: tuple[Replica, _Failure] | None = None
        for _ in range(self._max_attempts):
            candidates = pool.candidates(tried)
            if not candidates:
                break
            if failed is not None:
                self._metrics.observe_retry(pool.name, failed[0].name, failed[1].reason)
            decision = pool.policy.choose(route, candidates)
            pool.policy.on_routed(route, decision)
            tried.append(decision.replica)
            prefill = QueuedPrefill.of(route, decision)
            outcome = await self._attempt(pool, call, decision, arrived, prefill)
            if isinstance(outcome, Response):
                return outcome
            failed = (decision.replica, outcome)
            if outcome.refusal is not None and outcome.refusal.status == 429:
                last_429 = outcome.refusal
            elif outcome.refusal is not None:
                last_5xx = outcome.refusal
        pool.admission.record_finish()
        refusal = last_429 or last_5xx
        if refusal is not None:
            replica = tried[-1].name
            self._metrics.observe_request(
                pool.name, replica, "refused", str(refusal.status), self._since(arrived)
            )
            headers = {REQUEST_ID_HEADER: call.request_id, **refusal.headers}
            return Response(refusal.body, status_code=refusal.status, headers=headers)
        error = pool.unavailable(f"no replica that answered ({len(tried)} tried)")
        self._observe_refused(pool, "no_replica", error, arrived)
        raise error

    async def _attempt(
        self, pool: Pool, call: ProxyCall, decision: RouteDecision, arrived: float, prefill: QueuedPrefill
    ) -> Response | _Failure:
        """One try on the decided replica: the client's response, or why it failed before the first byte."""
        replica = decision.replica
        pool.begin(replica)
        upstream: aiohttp.ClientResponse | None = None
        handed_off = False
        try:
            upstream = await self._session.post(
                f"{replica.url}{ENDPOINT_PATHS[call.endpoint]}", data=call.body, headers=call.headers
            )
            status = upstream.status
            if status == 429 or status >= 500:
                refusal = _Refusal(
                    status, downstream_headers(upstream.headers.items()), await upstream.read()
                )
                if status in EJECTING_STATUSES:
                    pool.record_failure(replica)
                return _Failure("429" if status == 429 else "5xx", refusal)
            if call.fields.stream and status == 200:
                response = await self._relay(pool, call, decision, upstream, arrived, prefill)
                handed_off = True
                return response
            body = await upstream.read()
            pool.record_success(replica)
            self._finished(
                pool, decision, str(status), arrived, cached_tokens_in_body(body) if status < 300 else None
            )
            return Response(body, status_code=status, headers=downstream_headers(upstream.headers.items()))
        except (TimeoutError, aiohttp.ClientError) as exc:
            logger.info("attempt on %s failed before the first byte: %r", replica.name, exc)
            pool.record_failure(replica)
            return _Failure(_failure_reason(exc))
        finally:
            if not handed_off:
                prefill.settle()
                if upstream is not None:
                    release(upstream)
                pool.end(replica)

    async def _relay(
        self,
        pool: Pool,
        call: ProxyCall,
        decision: RouteDecision,
        upstream: aiohttp.ClientResponse,
        arrived: float,
        prefill: QueuedPrefill,
    ) -> RelayedStream:
        """Wait for the stream's first complete event (an error before it is still retryable), then hand the
        stream to a RelayedStream, which returns the replica's slot when it ends."""
        chunks = upstream.content.iter_any()
        framer = EventFramer()
        first = b""
        while not first:
            chunk = await anext(chunks, None)
            if chunk is None:
                first = framer.rest()
                break
            first = framer.feed(chunk)
        pool.record_success(decision.replica)
        self._metrics.observe_first_byte(pool.name, decision.replica.name, self._since(arrived))
        return RelayedStream(
            upstream,
            first,
            chunks,
            framer,
            named_events=call.named_events,
            headers=downstream_headers(upstream.headers.items()),
            on_finish=partial(self._stream_finished, pool, decision, arrived),
            lost=pool.lost_signal(decision.replica),
            on_first_token=prefill.settle,
        )

    def _stream_finished(
        self, pool: Pool, decision: RouteDecision, arrived: float, outcome: StreamOutcome
    ) -> None:
        pool.end(decision.replica)
        if outcome.end is StreamEnd.REPLICA_LOST:
            pool.record_failure(decision.replica)
        self._finished(
            pool, decision, outcome.end.value, arrived, outcome.cached_tokens, first_byte_seen=True
        )

    def _finished(
        self,
        pool: Pool,
        decision: RouteDecision,
        status: str,
        arrived: float,
        reported_cached: int | None,
        first_byte_seen: bool = False,
    ) -> None:
        elapsed = self._since(arrived)
        pool.admission.record_finish()
        name = decision.replica.name
        if not first_byte_seen:
            self._metrics.observe_first_byte(pool.name, name, elapsed)
        self._metrics.observe_request(pool.name, name, decision.reason, status, elapsed)
        if reported_cached is not None:
            self._metrics.observe_cached_tokens(
                pool.name, name, decision.predicted_cached_tokens, reported_cached
            )

    def _observe_refused(self, pool: Pool, reason: str, error: Exception, arrived: float) -> None:
        status = str(describe(error).status)
        self._metrics.observe_request(pool.name, NO_REPLICA, reason, status, self._since(arrived))

    async def _with_tokens(self, pool: Pool, call: ProxyCall, route: RouteRequest) -> RouteRequest:
        """The route with the prompt's token ids, counted by a routable replica (see prompt_tokens.py)."""
        replicas = pool.routable()
        if not replicas:
            return route
        counter = min(replicas, key=lambda replica: replica.in_flight)
        headers = {
            name: value
            for name, value in call.headers
            if name.lower() in ("authorization", REQUEST_ID_HEADER)
        }
        tokens = await pool.token_source.token_ids(
            self._client,
            counter,
            ENDPOINT_PATHS[call.endpoint],
            call.fields.body,
            headers,
            self._tokenize_timeout,
        )
        return replace(route, token_ids=tokens)

    def _since(self, start: float) -> float:
        return self._clock() - start


def _failure_reason(exc: aiohttp.ClientError | TimeoutError) -> str:
    if isinstance(exc, TimeoutError):  # aiohttp's connect and read timeouts are TimeoutErrors too
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect_error"
    return "read_error"
