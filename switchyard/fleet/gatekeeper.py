"""What a request passes on its way to the proxy and back: its key's limits, the response cache, the admission
hooks; and, when it has ended, the usage it is charged.

In order: the key's limits admit the request or answer 429 (tenancy on); a deterministic request is looked up
in the response cache (cache on) and a hit is answered at once; the admission hooks' `before` may refuse it;
the tenant's name and priority are written into the body (tenant_fields.py); the proxy routes it. The answer's
tokens are counted as it passes (usage_meter.py): a stream's output tokens draw on the key's tokens-per-minute
bucket as they are sent. When the request has ended, however it ended, the lease is settled to the real
usage and released, the hooks' `after` runs with that usage, and the usage and its cost are recorded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fastapi.responses import Response

from switchyard.fleet.admission import DEFAULT_TENANT
from switchyard.fleet.admission_hooks import AdmissionHooks, HookRequest, NoAdmissionHooks
from switchyard.fleet.errors import RateLimitedError
from switchyard.fleet.metrics import FleetMetrics
from switchyard.fleet.online_eval.recorder import OnlineEvalRecorder
from switchyard.fleet.pool import Pool
from switchyard.fleet.prices import PriceTable
from switchyard.fleet.proxy import Proxy, ProxyCall
from switchyard.fleet.relay import RelayedStream, StreamEnd, StreamOutcome
from switchyard.fleet.response_cache import (
    CACHE_HEADER,
    CacheDirective,
    CachedResponse,
    ResponseCache,
    cache_key,
    is_deterministic,
)
from switchyard.fleet.semantic_cache import SemanticCache, SemanticMatch
from switchyard.fleet.shadow import ShadowTraffic
from switchyard.fleet.tenancy.key_limiter import Lease, estimate_prompt_tokens
from switchyard.fleet.tenancy.records import Caller
from switchyard.fleet.tenancy.service import Tenancy
from switchyard.fleet.tenant_fields import max_output_tokens, tenant_body
from switchyard.fleet.usage import TokenUsage
from switchyard.fleet.usage_meter import UsageMeter

logger = logging.getLogger(__name__)

_STREAM_OUTCOMES = {
    StreamEnd.COMPLETED: "answered",
    StreamEnd.REPLICA_LOST: "cut_off",
    StreamEnd.CLIENT_GONE: "client_gone",
}


@dataclass(frozen=True)
class GateRequest:
    """A request at the gate: the proxy's call, and who sent it."""

    call: ProxyCall
    caller: Caller | None
    """The tenant's key (None: the gateway runs without tenancy)."""
    cache_namespace: str
    """What keeps cached answers apart: the tenant's name, or without tenancy a hash of the client's key."""
    cache_control: str | None = None
    limits_admitted: bool = False
    """The key's limits already admitted the request (a cascade's tier call: the cascade holds one lease for
    all its tiers), so they are not applied again."""


@dataclass
class _Admitted:
    """An admitted request's accounting until it ends."""

    tenant: str
    model: str
    prompt_estimate: int
    lease: Lease | None
    hook_token: Any
    meter: UsageMeter
    call: ProxyCall
    """The call as the client sent it (before the tenant's fields were written in), for the online-eval log."""
    sampled: bool = False
    """Logged for online evaluation when it ends."""
    tenancy: bool = False
    """Sent with a tenant's key: its usage is recorded."""
    started: float = 0.0
    settled: bool = False


class Gatekeeper:
    def __init__(
        self,
        proxy: Proxy,
        metrics: FleetMetrics,
        prices: PriceTable,
        tenancy: Tenancy | None = None,
        cache: ResponseCache | None = None,
        hooks: AdmissionHooks | None = None,
        online_eval: OnlineEvalRecorder | None = None,
        clock: Callable[[], float] = time.monotonic,
        shadows: dict[str, tuple[Pool, float]] | None = None,
        semantic: SemanticCache | None = None,
    ) -> None:
        """`online_eval`: logs a sampled share of the requests that reach a replica (online_eval/)."""
        self._proxy = proxy
        self._online_eval = online_eval
        self._shadows = shadows or {}
        """By pool name: the candidate pool that gets copies of its requests, and the share copied."""
        self.shadow = ShadowTraffic(proxy, online_eval, clock=clock)
        self._clock = clock
        self._metrics = metrics
        self._prices = prices
        self._tenancy = tenancy
        self._cache = cache
        self._semantic = semantic if cache is not None else None
        """The cache's semantic mode: on an exact miss, a cached answer to a question that means the same."""
        self._hooks: AdmissionHooks = hooks if hooks is not None else NoAdmissionHooks()
        self._hooked = hooks is not None

    async def forward(self, pool: Pool, request: GateRequest) -> Response:
        call, caller = request.call, request.caller
        started = self._clock()
        tenant = caller.tenant.name if caller is not None else DEFAULT_TENANT
        estimate = estimate_prompt_tokens(call.fields.route.text)
        lease = None if request.limits_admitted else self.admit(caller, pool.name, estimate)
        try:
            key, lookup, entry = self._cache_lookup(request)
            match = None
            if lookup == "miss" and self._semantic is not None:
                match, entry = await self._semantic_lookup(request)
                lookup = "semantic_hit" if entry is not None else lookup
            if self._cache is not None:
                self._metrics.observe_cache_lookup(pool.name, lookup)
            if entry is not None:
                if lease is not None:  # the request counts; its tokens were not computed
                    lease.settle(TokenUsage())
                    lease.release()
                await self._account(tenant, pool.name, TokenUsage(), "cache_hit", caller is not None)
                hit = "semantic-hit" if lookup == "semantic_hit" else "hit"
                return Response(entry.body, media_type=entry.media_type, headers={CACHE_HEADER: hit})
            hook_request = HookRequest(
                tenant=tenant,
                model=pool.name,
                endpoint=call.endpoint,
                request_id=call.request_id,
                prompt_tokens=estimate,
                max_tokens=max_output_tokens(call.fields.body),
            )
            try:
                hook_token = await self._hooks.before(hook_request)
            except Exception:
                if caller is not None:
                    self._metrics.observe_tenant_request(tenant, pool.name, "refused")
                raise
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        storing = key is not None and self._stores(request)
        shadow = self._shadows.get(pool.name)
        shadowed = shadow is not None and self.shadow.chosen(shadow[1])
        # a shadowed request is logged too, so the candidate's answer has the primary's beside it
        opt_in = caller.tenant.eval_sample if caller is not None else None
        sampled = self._online_eval is not None and (shadowed or self._online_eval.sampled(tenant, opt_in))
        if shadow is not None and shadowed:
            self.shadow.send(shadow[0], call, tenant)
        if caller is None and not storing and not self._hooked and not sampled:
            # Nothing counts this request's tokens: no meter on its way (no parsing of each event).
            response = await self._proxy.forward(pool, call)
            if self._cache is not None:
                response.headers[CACHE_HEADER] = lookup
            return response
        hide_usage = False
        sent = call
        if caller is not None:
            forwarded = tenant_body(call.fields.body, call.endpoint, caller.tenant)
            call = replace(call, body=forwarded.body, tenant=tenant, weight=caller.tenant.weight)
            hide_usage = forwarded.hide_usage_chunk
        meter = UsageMeter(
            on_output_tokens=lease.charge_output if lease is not None else _ignore,
            drop_usage_chunk=hide_usage,
            record_up_to=self._record_limit(storing, sampled),
        )
        admitted = _Admitted(
            tenant, pool.name, estimate, lease, hook_token, meter, sent, sampled, started, caller is not None
        )
        try:
            response = await self._proxy.forward(pool, call)
        except BaseException:
            await asyncio.shield(self._settle(admitted, TokenUsage(), "refused", caller is not None))
            raise
        if self._cache is not None:
            response.headers[CACHE_HEADER] = lookup
        if isinstance(response, RelayedStream):
            response.watch(
                meter.observe_events,
                lambda outcome: self._stream_ended(
                    admitted, outcome, key if storing else None, response, match
                ),
            )
            return response
        answered = response.status_code < 400
        if answered:
            meter.observe_body(bytes(response.body))
        usage = meter.usage(estimate) if answered else TokenUsage()
        await self._settle(admitted, usage, "answered" if answered else "error", caller is not None)
        self._log(admitted, bytes(response.body), False, response.status_code, usage)
        if storing and key is not None and response.status_code == 200 and self._cache is not None:
            self._cache.put(key, bytes(response.body), response.media_type or "application/json")
            self._metrics.set_cache_entries(len(self._cache))
            if self._semantic is not None:
                self._semantic.remember(match, key)
        return response

    async def _semantic_lookup(
        self, request: GateRequest
    ) -> tuple[SemanticMatch | None, CachedResponse | None]:
        """The request's embedded question, and the cached answer to a similar one (None: none, or expired)."""
        assert self._semantic is not None and self._cache is not None
        if not CacheDirective.from_header(request.cache_control).look_up:
            return None, None
        match = await self._semantic.find(
            request.cache_namespace, request.call.endpoint, request.call.fields.body
        )
        if match is None or match.key is None:
            return match, None
        entry = self._cache.get(match.key)
        if entry is None:
            self._semantic.index.discard(match.key)
        return match, entry

    def _record_limit(self, storing: bool, sampled: bool) -> int:
        """Bytes of the answer the meter keeps: for the response cache, the online-eval log, or both."""
        limit = self._cache.config.max_bytes if storing and self._cache is not None else 0
        if sampled and self._online_eval is not None:
            limit = max(limit, self._online_eval.config.max_bytes)
        return limit

    def _log(
        self, admitted: _Admitted, answer: bytes | None, streamed: bool, status: int, usage: TokenUsage
    ) -> None:
        if not admitted.sampled or self._online_eval is None:
            return
        self._online_eval.record(
            request_id=admitted.call.request_id,
            tenant=admitted.tenant,
            pool=admitted.model,
            endpoint=admitted.call.endpoint,
            request=admitted.call.body,
            answer=answer,
            streamed=streamed,
            status=status,
            latency=self._clock() - admitted.started,
            usage=usage,
        )

    def admit(self, caller: Caller | None, model: str, estimate: int) -> Lease | None:
        """The key's limits: a lease on its buckets (None without tenancy), or RateLimitedError (429)."""
        if caller is None or self._tenancy is None:
            return None
        try:
            return self._tenancy.limiter.admit(caller, estimate)
        except RateLimitedError:
            self._metrics.observe_tenant_request(caller.tenant.name, model, "rate_limited")
            raise

    def _cache_lookup(self, request: GateRequest) -> tuple[str | None, str, CachedResponse | None]:
        """The request's cache key (None: not to be cached), the lookup's result, and the entry on a hit."""
        if self._cache is None:
            return None, "off", None
        body = request.call.fields.body
        if not is_deterministic(body):
            return None, "uncacheable", None
        key = cache_key(request.cache_namespace, request.call.endpoint, body)
        if not CacheDirective.from_header(request.cache_control).look_up:
            return key, "bypass", None
        entry = self._cache.get(key)
        return key, "hit" if entry is not None else "miss", entry

    def _stores(self, request: GateRequest) -> bool:
        return CacheDirective.from_header(request.cache_control).store

    async def _stream_ended(
        self,
        admitted: _Admitted,
        outcome: StreamOutcome,
        key: str | None,
        response: RelayedStream,
        match: SemanticMatch | None = None,
    ) -> None:
        usage = admitted.meter.usage(admitted.prompt_estimate)
        recorded = admitted.meter.recorded
        # cached before the hooks settle: once a request is accounted for, its answer is there to hit
        if key is not None and outcome.end is StreamEnd.COMPLETED and recorded and self._cache is not None:
            self._cache.put(key, recorded, response.media_type or "text/event-stream")
            self._metrics.set_cache_entries(len(self._cache))
            if self._semantic is not None:
                self._semantic.remember(match, key)
        await self._settle(admitted, usage, _STREAM_OUTCOMES[outcome.end], admitted.tenancy)
        self._log(admitted, recorded, True, response.status_code, usage)

    async def _settle(self, admitted: _Admitted, usage: TokenUsage, outcome: str, tenancy: bool) -> None:
        """Once per admitted request: the lease, the hooks' `after`, the usage's record."""
        if admitted.settled:
            return
        admitted.settled = True
        if admitted.lease is not None:
            admitted.lease.settle(usage)
            admitted.lease.release()
        try:
            await self._hooks.after(admitted.hook_token, usage)
        except Exception:
            logger.exception("an admission hook failed to settle request usage %s", usage)
        await self._account(admitted.tenant, admitted.model, usage, outcome, tenancy)

    async def _account(self, tenant: str, model: str, usage: TokenUsage, outcome: str, tenancy: bool) -> None:
        if not tenancy or self._tenancy is None:
            return
        cost = self._prices.cost(model, usage)
        self._metrics.observe_tenant_request(tenant, model, outcome)
        self._metrics.observe_tenant_usage(tenant, model, usage, cost)
        try:
            await self._tenancy.record(tenant, model, usage, cost, cache_hit=outcome == "cache_hit")
        except Exception:
            logger.exception("recording the usage of tenant %s failed", tenant)


def _ignore(_: int) -> None:
    return None
