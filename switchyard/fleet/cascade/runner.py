"""A request to a cascade: each tier in turn through the gatekeeper, until one's answer is kept.

Every tier but the last is asked without streaming and with logprobs (answer.py), and its answer is judged
(decision.py): kept, it is the client's answer; passed over, the next tier is asked. A judged tier that
fails (no replica, 429, 5xx) is passed over too; a 4xx is the request's own fault and goes back at once. The
last tier answers whatever it says, streamed live when the client asked for a stream. A streamed request
whose first tier is kept gets that answer replayed as events, so its first token arrives only once the first
tier's whole answer was judged: streaming cascades trade time to first token for cost.

Each tier call goes through the gatekeeper as a request to that tier's pool, so the admission hooks (the
credits ledger), the usage records and the tenant metrics charge each call at its own model's price; the
key's limits admit the cascade's request once, and settle to every tier's tokens when it ends. The answer
names the model that answered (`model` and `x-switchyard-answered-by`) and its usage counts every tier's
tokens; `x-switchyard-cascade` says whether the first tier's answer was kept (`accepted`) or not (`escalated`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fastapi.responses import Response

from switchyard.fleet.cascade.answer import (
    answer_events,
    asked_logprobs,
    asked_usage_chunk,
    kept_answer,
    tier_body,
    with_earlier_usage,
)
from switchyard.fleet.cascade.config import CascadeConfig
from switchyard.fleet.cascade.decision import answer_confidence, judge_answer
from switchyard.fleet.errors import BadRequestError, NoHealthyReplicaError, QueueFullError
from switchyard.fleet.gatekeeper import Gatekeeper, GateRequest
from switchyard.fleet.metrics import FleetMetrics
from switchyard.fleet.pool import Pool
from switchyard.fleet.relay import RelayedStream, StreamOutcome
from switchyard.fleet.request_fields import read_request_fields
from switchyard.fleet.tenancy.key_limiter import Lease, estimate_prompt_tokens
from switchyard.fleet.usage import TokenUsage, token_usage
from switchyard.fleet.usage_meter import UsageMeter

logger = logging.getLogger(__name__)

CASCADE_HEADER = "x-switchyard-cascade"
"""`accepted`: the first tier's answer was kept; `escalated`: a later tier answered."""
ANSWERED_BY_HEADER = "x-switchyard-answered-by"
"""The pool (model) whose answer the client got."""
CASCADE_ENDPOINTS = frozenset({"chat", "completions"})
"""Endpoints whose answers report token logprobs the decision can read."""
_PASSED_HEADERS = frozenset({"content-length", "content-type", "transfer-encoding", "content-encoding"})


class CascadeRunner:
    def __init__(self, gatekeeper: Gatekeeper, pools: Mapping[str, Pool], metrics: FleetMetrics) -> None:
        self._gatekeeper = gatekeeper
        self._pools = pools
        self._metrics = metrics

    async def forward(self, cascade: CascadeConfig, request: GateRequest) -> Response:
        call = request.call
        if call.endpoint not in CASCADE_ENDPOINTS:
            raise BadRequestError(
                f"`{cascade.name}` is a cascade, which serves /v1/chat/completions and /v1/completions; "
                f"send this request to one of its models ({', '.join(cascade.tiers)})",
                param="model",
            )
        estimate = estimate_prompt_tokens(call.fields.route.text)
        lease = self._gatekeeper.admit(request.caller, cascade.name, estimate)
        handed_off = False
        earlier = TokenUsage()
        try:
            for position, tier in enumerate(cascade.tiers[:-1]):
                tier_request = self._tier_request(request, tier, judged=True)
                kept, response, used = await self._judged(
                    cascade, tier, tier_request, call.fields.body, earlier
                )
                earlier += used
                if response is not None:
                    outcome = "accepted" if position == 0 else "escalated"
                    if kept:
                        self._metrics.observe_cascade_request(cascade.name, tier, outcome)
                    else:  # the request's own error, returned as it is
                        self._metrics.observe_cascade_request(cascade.name, tier, "error")
                    _settle(lease, earlier)
                    return _with_headers(response, outcome if kept else "error", tier)
            last = cascade.tiers[-1]
            try:
                response = await self._gatekeeper.forward(
                    self._pools[last], self._tier_request(request, last)
                )
            except Exception:
                self._metrics.observe_cascade_request(cascade.name, last, "error")
                raise
            answered = response.status_code < 400
            self._metrics.observe_cascade_request(cascade.name, last, "escalated" if answered else "error")
            if isinstance(response, RelayedStream):
                self._watch(response, earlier, asked_usage_chunk(call.fields.body), lease, estimate)
                handed_off = True
                response.headers[CASCADE_HEADER] = "escalated"
                response.headers[ANSWERED_BY_HEADER] = last
                return response
            if not answered or call.fields.stream:  # an error, or a replayed stream from the cache
                _settle(lease, earlier)
                return _with_headers(response, "escalated" if answered else "error", last)
            answer = _json_object(bytes(response.body))
            if answer is None:
                _settle(lease, earlier)
                return _with_headers(response, "escalated", last)
            used = token_usage(answer) or TokenUsage()
            _settle(lease, earlier + used)
            body = json.dumps(kept_answer(answer, last, earlier, keep_logprobs=True), ensure_ascii=False)
            return _replaced(response, body.encode(), "application/json", "escalated", last)
        finally:
            if not handed_off and lease is not None:
                lease.release()

    async def _judged(
        self,
        cascade: CascadeConfig,
        tier: str,
        request: GateRequest,
        client_body: Mapping[str, Any],
        earlier: TokenUsage,
    ) -> tuple[bool, Response | None, TokenUsage]:
        """Ask a judged tier: (kept, the client's response when the cascade ends here, tokens it used);
        `earlier`: the tokens of the tiers asked before it, which a kept answer's usage counts too."""
        try:
            response = await self._gatekeeper.forward(self._pools[tier], request)
        except (NoHealthyReplicaError, QueueFullError) as exc:
            logger.info("cascade %s: tier %s unavailable (%s), escalating", cascade.name, tier, exc)
            self._metrics.observe_cascade_decision(cascade.name, tier, False, "tier_error")
            return False, None, TokenUsage()
        status = response.status_code
        if 400 <= status < 500 and status != 429:
            return False, response, TokenUsage()
        answer = _json_object(bytes(response.body)) if status < 400 else None
        if answer is None:
            self._metrics.observe_cascade_decision(cascade.name, tier, False, "tier_error")
            return False, None, TokenUsage()
        used = token_usage(answer) or TokenUsage()
        call = request.call
        verdict = judge_answer(answer_confidence(answer, call.endpoint), cascade.thresholds)
        self._metrics.observe_cascade_decision(cascade.name, tier, verdict.accept, verdict.reason.value)
        if not verdict.accept:
            return False, None, used
        kept = kept_answer(answer, tier, earlier, asked_logprobs(client_body, call.endpoint))
        if client_body.get("stream") is True:
            events = answer_events(kept, call.endpoint, asked_usage_chunk(client_body))
            return True, _replaced(response, events, "text/event-stream", "accepted", tier), used
        body = json.dumps(kept, ensure_ascii=False).encode()
        return True, _replaced(response, body, "application/json", "accepted", tier), used

    def _tier_request(self, request: GateRequest, tier: str, judged: bool = False) -> GateRequest:
        call = request.call
        raw = tier_body(call.fields.body, call.endpoint, tier, judged)
        fields = read_request_fields(raw, call.endpoint, dict(call.headers))
        return replace(request, call=replace(call, body=raw, fields=fields), limits_admitted=True)

    def _watch(
        self, stream: RelayedStream, earlier: TokenUsage, rewrite: bool, lease: Lease | None, estimate: int
    ) -> None:
        """The last tier's stream: its usage chunk counts the earlier tiers too; the lease settles at its end."""
        meter = UsageMeter()

        def observe(events: bytes) -> bytes:
            meter.observe_events(events)
            return _usage_rewritten(events, earlier) if rewrite and earlier.total_tokens else events

        async def ended(_: StreamOutcome) -> None:
            if lease is not None:
                _settle(lease, earlier + meter.usage(estimate))
                lease.release()

        stream.watch(observe, ended)


def _settle(lease: Lease | None, usage: TokenUsage) -> None:
    if lease is not None:
        lease.settle(usage)


def _json_object(raw: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _kept_headers(response: Response) -> dict[str, str]:
    return {name: value for name, value in response.headers.items() if name.lower() not in _PASSED_HEADERS}


def _replaced(response: Response, body: bytes, media_type: str, outcome: str, tier: str) -> Response:
    headers = {**_kept_headers(response), CASCADE_HEADER: outcome, ANSWERED_BY_HEADER: tier}
    return Response(body, status_code=response.status_code, media_type=media_type, headers=headers)


def _with_headers(response: Response, outcome: str, tier: str) -> Response:
    response.headers[CASCADE_HEADER] = outcome
    response.headers[ANSWERED_BY_HEADER] = tier
    return response


def _usage_rewritten(events: bytes, earlier: TokenUsage) -> bytes:
    """Events with each usage report's counts raised by the earlier tiers' tokens."""
    if b'"usage"' not in events:
        return events
    out = []
    for line in events.split(b"\n"):
        if line.startswith(b"data:") and b'"usage"' in line:
            payload = _json_object(line[5:].strip())
            usage = payload.get("usage") if payload is not None else None
            if payload is not None and isinstance(usage, Mapping):
                payload["usage"] = with_earlier_usage(usage, earlier)
                line = b"data: " + json.dumps(payload, ensure_ascii=False).encode()
        out.append(line)
    return b"\n".join(out)
