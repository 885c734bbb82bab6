"""How fast a queue drains, and the Retry-After that follows: shared by a server's admission and the fleet's.

Torch-free and engine-free, so the gateway (an HTTP client of the replicas) sheds load with the same rule a
server uses.
"""

from __future__ import annotations

import time
from collections import deque


class DrainRate:
    """Finished requests per second over a sliding window: how fast the queue drains, for Retry-After."""

    def __init__(self, window: float = 30.0, start: float | None = None) -> None:
        self.window = window
        self._start = time.monotonic() if start is None else start
        self._finishes: deque[float] = deque()

    def record(self, when: float) -> None:
        self._finishes.append(when)
        self._trim(when)

    def per_second(self, when: float) -> float | None:
        """None until a request has finished within the window."""
        self._trim(when)
        span = min(self.window, when - self._start)
        if not self._finishes or span <= 0:
            return None
        return len(self._finishes) / span

    def _trim(self, when: float) -> None:
        while self._finishes and self._finishes[0] < when - self.window:
            self._finishes.popleft()


RETRY_AFTER_UNKNOWN = 10.0
"""Retry-After, in seconds, while no request has finished recently (no drain rate to estimate from)."""
RETRY_AFTER_MAX = 60.0
"""The OpenAI client honours Retry-After only up to 60 s."""


def estimate_retry_after(num_waiting: int, drain_per_second: float | None) -> float:
    """Seconds until the requests already waiting are served at the current drain rate, within [1, 60].

    Under overload the arrival rate is at least the drain rate, so a retry before the backlog is served would
    most likely meet a full queue again.
    """
    if drain_per_second is None:
        return RETRY_AFTER_UNKNOWN
    return min(RETRY_AFTER_MAX, max(1.0, num_waiting / drain_per_second))
