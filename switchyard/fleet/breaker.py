"""A circuit breaker per replica: consecutive failures open it, probes after a growing backoff close it.

It only counts and keeps time; the pool turns "opened" into ejecting the replica and the health checker turns
"probe due" into a GET /health. Times are passed in (time.monotonic() in use), so the rules are testable
without waiting.
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.fleet.config import BreakerConfig


@dataclass
class CircuitBreaker:
    config: BreakerConfig
    consecutive_failures: int = 0
    openings: int = 0
    """Times it opened without a successful probe in between; each doubles the wait before the next probe."""
    next_probe_at: float | None = None
    """When the open breaker may be probed (None while closed)."""

    @property
    def is_open(self) -> bool:
        return self.next_probe_at is not None

    def record_success(self) -> None:
        """A request or probe succeeded: the count starts over and an open breaker closes."""
        self.consecutive_failures = 0
        self.openings = 0
        self.next_probe_at = None

    def record_failure(self, now: float) -> bool:
        """A request failed or timed out; True when this failure opened the breaker."""
        self.consecutive_failures += 1
        if self.is_open or self.consecutive_failures < self.config.failure_threshold:
            return False
        self.open(now)
        return True

    def open(self, now: float) -> None:
        """Open now (a failed probe, or an active check the replica failed outright), backing off further."""
        self.openings += 1
        self.next_probe_at = now + self.backoff()

    def backoff(self) -> float:
        """Seconds from the latest opening to the next probe: base, doubled per opening, capped."""
        doublings = max(0, self.openings - 1)
        return min(self.config.max_backoff, self.config.base_backoff * 2.0 ** min(doublings, 32))

    def probe_due(self, now: float) -> bool:
        return self.next_probe_at is not None and now >= self.next_probe_at

    def seconds_to_probe(self, now: float) -> float:
        return 0.0 if self.next_probe_at is None else max(0.0, self.next_probe_at - now)
