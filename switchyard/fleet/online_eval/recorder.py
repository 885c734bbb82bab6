"""What the gatekeeper asks of online eval: is this request sampled, and here is how it ended.

Sampling draws per request at the tenant's rate (config.py); a sampled request's record goes to the writer's
queue, so logging never delays or fails the caller.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from switchyard.fleet.online_eval.config import OnlineEvalConfig
from switchyard.fleet.online_eval.log import OnlineEvalLog
from switchyard.fleet.online_eval.metrics import OnlineEvalMetrics
from switchyard.fleet.online_eval.record import LoggedExchange
from switchyard.fleet.online_eval.stream_text import stream_text
from switchyard.fleet.online_eval.writer import LogWriter
from switchyard.fleet.prices import PriceTable
from switchyard.fleet.usage import TokenUsage


class OnlineEvalRecorder:
    def __init__(
        self,
        config: OnlineEvalConfig,
        prices: PriceTable,
        draw: Callable[[], float] = random.random,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._prices = prices
        self._draw = draw
        self._wall_clock = wall_clock
        self.writer = LogWriter(OnlineEvalLog(config.log_path), config.queue)
        self.metrics: OnlineEvalMetrics | None = None
        """Set by the runtime, which owns the registry."""

    @property
    def log(self) -> OnlineEvalLog:
        return self.writer.log

    def sampled(self, tenant: str, opt_in: float | None = None) -> bool:
        """Draw for one request; `opt_in` is the tenant's own rate from the tenants store (None: the config's)."""
        rate = self.config.rate(tenant) if opt_in is None else opt_in
        return rate > 0 and self._draw() < rate

    def record(
        self,
        *,
        request_id: str,
        tenant: str,
        pool: str,
        endpoint: str,
        request: bytes,
        answer: bytes | None,
        streamed: bool,
        status: int,
        latency: float,
        usage: TokenUsage,
        shadow: bool = False,
    ) -> None:
        """Queue the exchange; `answer` None (it outgrew max_bytes) logs an empty response."""
        text = "" if answer is None else stream_text(answer) if streamed else answer.decode(errors="replace")
        exchange = LoggedExchange(
            request_id=request_id,
            tenant=tenant,
            pool=pool,
            endpoint=endpoint,
            request=request.decode(errors="replace"),
            response=text,
            status=status,
            latency=latency,
            usage=usage,
            cost=self._prices.cost(pool, usage),
            created=self._wall_clock(),
            shadow=shadow,
        )
        if self.writer.submit(exchange) and self.metrics is not None:
            self.metrics.observe_logged(exchange)
