"""The circuit breaker's rules, with time passed in."""

from __future__ import annotations

from switchyard.fleet.breaker import CircuitBreaker
from switchyard.fleet.config import BreakerConfig


def test_consecutive_failures_open_it_and_a_success_resets_the_count() -> None:
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=3, base_backoff=1.0, max_backoff=8.0))
    assert not breaker.record_failure(0.0)
    assert not breaker.record_failure(0.0)
    breaker.record_success()
    assert not breaker.record_failure(0.0) and not breaker.record_failure(0.0)
    assert breaker.record_failure(10.0)  # the third in a row
    assert breaker.is_open and not breaker.record_failure(10.0)  # opens once
    assert not breaker.probe_due(10.5) and breaker.probe_due(11.0)
    assert breaker.seconds_to_probe(10.25) == 0.75


def test_failed_probes_back_off_further_up_to_the_cap() -> None:
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1, base_backoff=1.0, max_backoff=5.0))
    breaker.record_failure(0.0)
    waits = []
    for now in (0.0, 100.0, 200.0, 300.0, 400.0):
        if now:
            breaker.open(now)  # the probe failed
        waits.append(breaker.next_probe_at - now if breaker.next_probe_at is not None else None)
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]
    breaker.record_success()
    assert not breaker.is_open and breaker.openings == 0 and breaker.seconds_to_probe(0.0) == 0.0
