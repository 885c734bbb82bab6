"""A token bucket: `capacity` units that refill at `per_second`; what requests and tokens per minute draw on.

Taking may drive the level below zero: output tokens are counted after they were generated, when there is no
refusing them any more, so they become a debt that later requests wait out. Time comes from the caller (a
clock reading per call), so the bucket is exact under a fake clock.
"""

from __future__ import annotations

_ROUNDING = 1e-9
"""Units a bucket may be short and still count as full enough: refilling for exactly the wait it announced
must be enough, whatever the floating-point rounding of rate x time."""


class TokenBucket:
    def __init__(self, capacity: float, per_second: float, now: float, level: float | None = None) -> None:
        """Full unless `level` says otherwise (at most `capacity`)."""
        if capacity <= 0 or per_second <= 0:
            raise ValueError("a token bucket needs a positive capacity and refill rate")
        self.capacity = capacity
        self.per_second = per_second
        self._level = capacity if level is None else min(level, capacity)
        self._at = now

    @classmethod
    def per_minute(cls, limit: int, now: float, level: float | None = None) -> TokenBucket:
        """A bucket of `limit` units that refills completely in a minute."""
        return cls(float(limit), limit / 60.0, now, level)

    def level(self, now: float) -> float:
        """Units available at `now` (negative while in debt)."""
        self._refill(now)
        return self._level

    def wait(self, amount: float, now: float) -> float:
        """Seconds until `amount` units are there (0: now). More than the capacity waits for a full bucket,
        so a request larger than the bucket is not refused for ever."""
        needed = min(amount, self.capacity)
        missing = needed - self.level(now)
        return missing / self.per_second if missing > _ROUNDING else 0.0

    def take(self, amount: float, now: float) -> None:
        """Draw `amount` units (the level may go below zero); a negative amount gives units back, up to full."""
        self._refill(now)
        self._level = min(self._level - amount, self.capacity)

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._level = min(self.capacity, self._level + (now - self._at) * self.per_second)
            self._at = now
