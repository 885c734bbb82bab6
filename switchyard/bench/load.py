"""When requests arrive: Poisson or gamma-distributed gaps at a request rate, optionally ramped up linearly."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LoadShape:
    request_rate: float = math.inf
    """Mean arrivals per second; inf sends everything at once."""
    burstiness: float = 1.0
    """Gamma shape of the gaps: 1 is Poisson, below 1 burstier, above 1 more regular."""
    max_concurrency: int | None = None
    """Requests in flight at most; arrivals beyond it wait for a slot, and (as in vLLM's benchmark) their
    latencies count from when they are sent, not from their arrival, so the wait is not in them."""
    ramp_up: float = 0.0
    """Seconds over which the rate grows linearly from 0 to request_rate."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.request_rate > 0:
            raise ValueError(f"request rate must be positive, got {self.request_rate}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be positive, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max concurrency must be at least 1, got {self.max_concurrency}")
        if self.ramp_up < 0:
            raise ValueError(f"ramp-up must be non-negative, got {self.ramp_up}")


def arrival_times(shape: LoadShape, count: int) -> np.ndarray:
    """Seconds from the start at which each of `count` arrivals happens (non-decreasing, first gap included).

    Gaps are drawn for a unit-rate process (gamma, mean 1) and mapped through the inverse of the cumulative
    rate Λ(t) = ∫λ, which turns a constant-rate process into one that follows λ(t) exactly: with a linear
    ramp λ(t) = r·t/T for t < T, Λ(t) = r·t²/(2T), then r·T/2 + r·(t − T).
    """
    if math.isinf(shape.request_rate):
        return np.zeros(count)
    rng = np.random.default_rng(shape.seed)
    gaps = rng.gamma(shape.burstiness, 1.0 / shape.burstiness, size=count)
    cumulative = np.cumsum(gaps)  # Λ at each arrival
    rate, ramp = shape.request_rate, shape.ramp_up
    if ramp == 0:
        return cumulative / rate
    in_ramp = cumulative < rate * ramp / 2
    return np.where(
        in_ramp,
        np.sqrt(2 * ramp * cumulative / rate),
        ramp + (cumulative - rate * ramp / 2) / rate,
    )
