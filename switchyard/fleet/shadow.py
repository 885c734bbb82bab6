"""Shadow traffic: a copy of a share of a pool's requests sent to a candidate pool, in the background.

The copy starts once the caller's request is admitted and runs as its own task: the caller's answer never
waits for it, and a failing candidate changes nothing for the caller. The copy goes without the tenant's
limits, hooks or usage (the tenant is not charged for it), as a non-streamed request with the candidate
pool's name as its model; its answer is logged beside the primary's (same request id, `shadow` set) when
online evaluation is on (online_eval/).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace

from switchyard.fleet.online_eval.recorder import OnlineEvalRecorder
from switchyard.fleet.pool import Pool
from switchyard.fleet.proxy import Proxy, ProxyCall
from switchyard.fleet.relay import RelayedStream
from switchyard.fleet.request_fields import read_request_fields
from switchyard.fleet.usage_meter import UsageMeter

logger = logging.getLogger(__name__)


class ShadowTraffic:
    def __init__(
        self,
        proxy: Proxy,
        online_eval: OnlineEvalRecorder | None,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._proxy = proxy
        self._online_eval = online_eval
        self._draw = draw
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = 0
        """Copies sent (whatever they answered), for tests and operators."""

    def chosen(self, share: float) -> bool:
        return self._draw() < share

    def send(self, candidate: Pool, call: ProxyCall, tenant: str) -> None:
        """Start the copy of `call` to `candidate` and return at once."""
        task = asyncio.create_task(self._copy(candidate, call, tenant), name=f"shadow-{call.request_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _copy(self, candidate: Pool, call: ProxyCall, tenant: str) -> None:
        started = self._clock()
        try:
            shadow_call = _shadow_call(call, candidate.name)
            response = await self._proxy.forward(candidate, shadow_call)
            if isinstance(response, RelayedStream):  # a non-streamed request answered as a stream: unexpected
                return
            self.sent += 1
            body = bytes(response.body)
        except Exception:
            logger.warning(
                "the shadow copy of %s to pool %s failed", call.request_id, candidate.name, exc_info=True
            )
            return
        if self._online_eval is None:
            return
        meter = UsageMeter()
        meter.observe_body(body)
        self._online_eval.record(
            request_id=call.request_id,
            tenant=tenant,
            pool=candidate.name,
            endpoint=call.endpoint,
            request=shadow_call.body,
            answer=body,
            streamed=False,
            status=response.status_code,
            latency=self._clock() - started,
            usage=meter.usage(0),
            shadow=True,
        )


def _shadow_call(call: ProxyCall, pool: str) -> ProxyCall:
    """The call for the candidate pool: its model name, not streamed (the copy's answer is only logged)."""
    body = dict(call.fields.body)
    body["model"] = pool
    body.pop("stream", None)
    body.pop("stream_options", None)
    raw = json.dumps(body).encode()
    fields = read_request_fields(raw, call.endpoint, dict(call.headers))
    return replace(call, body=raw, fields=fields)
