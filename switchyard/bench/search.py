"""`--find-max-rate`: the largest request rate whose fixed-length run meets the SLO, by bracketing then bisection.

Starting at a guess, the rate doubles until a probe fails (or halves until one passes), then bisects the bracket
[highest passing, lowest failing] until it is narrower than `tolerance` × its upper end. Each probe is a full
run; latency under load is noisy, so the result is the highest rate *seen* to pass, not an interpolation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from switchyard.bench.summary import Summary


@dataclass(frozen=True)
class Probe:
    rate: float
    meets: bool
    summary: Summary | None = None


@dataclass(frozen=True)
class SearchResult:
    max_rate: float | None
    """Highest rate that met the SLO; None when even min_rate did not."""
    min_failing_rate: float | None
    """Lowest rate that missed it; None when max_rate reached the ceiling without failing."""
    probes: tuple[Probe, ...]
    converged: bool
    """The bracket closed to the tolerance (rather than running out of probes or hitting a limit)."""


async def find_max_rate(
    probe: Callable[[float], Awaitable[Probe]],
    *,
    start_rate: float,
    tolerance: float = 0.1,
    max_probes: int = 10,
    min_rate: float = 0.01,
    max_rate: float = 1e6,
) -> SearchResult:
    if not (start_rate > 0 and 0 < tolerance < 1 and max_probes >= 1 and 0 < min_rate <= max_rate):
        raise ValueError(
            "find-max-rate needs start_rate > 0, 0 < tolerance < 1, max_probes >= 1, min_rate > 0"
        )
    passing: float | None = None
    failing: float | None = None
    probes: list[Probe] = []
    rate = min(max(start_rate, min_rate), max_rate)
    while len(probes) < max_probes:
        outcome = await probe(rate)
        probes.append(outcome)
        if outcome.meets:
            passing = rate if passing is None else max(passing, rate)
        else:
            failing = rate if failing is None else min(failing, rate)
        if passing is not None and failing is not None:
            if failing - passing <= tolerance * failing:
                return SearchResult(passing, failing, tuple(probes), converged=True)
            rate = (passing + failing) / 2
        elif failing is None:
            if rate >= max_rate:
                break
            rate = min(rate * 2, max_rate)
        else:
            if rate <= min_rate:
                break
            rate = max(rate / 2, min_rate)
    return SearchResult(passing, failing, tuple(probes), converged=False)
