"""Each key's limits under a fake clock: the buckets refill at their rate, and a refusal's Retry-After is the
time its own bucket needs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from switchyard.fleet.errors import RateLimitedError, describe
from switchyard.fleet.tenancy.key_limiter import KeyLimiter, estimate_prompt_tokens
from switchyard.fleet.tenancy.records import ApiKeyRecord, Caller, KeyLimits, Tenant
from switchyard.fleet.tenancy.token_bucket import TokenBucket
from switchyard.fleet.usage import TokenUsage


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def caller(limits: KeyLimits, key_id: str = "k1") -> Caller:
    record = ApiKeyRecord(key_id, "alice", "hash", "sy-abcdef", limits, None, created=0.0)
    return Caller(Tenant("alice"), record)


def refusal(limiter: KeyLimiter, who: Caller, prompt_tokens: int = 1) -> RateLimitedError:
    with pytest.raises(RateLimitedError) as raised:
        limiter.admit(who, prompt_tokens)
    return raised.value


def test_requests_per_minute_refill_and_retry_after_comes_from_the_bucket() -> None:
    clock = FakeClock()
    limiter = KeyLimiter(clock)
    alice = caller(KeyLimits(requests_per_minute=3))
    for _ in range(3):
        limiter.admit(alice, 1).release()
    error = refusal(limiter, alice)
    assert error.limit == "requests"
    assert error.retry_after == pytest.approx(20.0)  # one request refills in 60 / 3 s
    info = describe(error)
    assert info.status == 429 and info.code == "rate_limit_exceeded" and info.type == "requests"
    assert info.headers["Retry-After"] == "20"
    clock.advance(19.0)
    assert refusal(limiter, alice).retry_after == pytest.approx(1.0)
    clock.advance(1.0)
    limiter.admit(alice, 1).release()
    assert refusal(limiter, alice).retry_after == pytest.approx(20.0)


def test_tokens_per_minute_count_the_prompt_at_admission_and_output_as_it_streams() -> None:
    clock = FakeClock()
    limiter = KeyLimiter(clock)
    alice = caller(KeyLimits(tokens_per_minute=600))  # 10 tokens a second
    lease = limiter.admit(alice, 100)
    lease.charge_output(300)
    lease.charge_output(150)  # 550 of 600 used
    lease.release()
    error = refusal(limiter, alice, 100)
    assert error.limit == "tokens"
    assert error.retry_after == pytest.approx(5.0)  # 50 missing at 10 a second
    assert describe(error).headers["Retry-After"] == "5"
    # Output beyond the bucket is a debt: it cannot be refused once generated, so later requests wait it out.
    clock.advance(5.0)
    lease = limiter.admit(alice, 100)
    lease.charge_output(700)
    lease.release()
    assert refusal(limiter, alice, 10).retry_after == pytest.approx(71.0)  # 700 owed + 10 wanted at 10/s


def test_settling_corrects_the_prompt_estimate_to_the_reported_usage() -> None:
    clock = FakeClock()
    limiter = KeyLimiter(clock)
    alice = caller(KeyLimits(tokens_per_minute=600))
    lease = limiter.admit(alice, 300)  # estimated
    lease.charge_output(100)
    lease.settle(TokenUsage(prompt_tokens=50, output_tokens=100))  # the replica counted 50
    lease.release()
    assert refusal(limiter, alice, 600).retry_after == pytest.approx(15.0)  # 150 used of 600


def test_concurrent_requests_are_capped_until_one_ends() -> None:
    limiter = KeyLimiter(FakeClock())
    alice = caller(KeyLimits(max_concurrent=2))
    first, _second = limiter.admit(alice, 1), limiter.admit(alice, 1)
    error = refusal(limiter, alice)
    assert "concurrent" in str(error) and error.retry_after == 1.0
    first.release()
    first.release()  # idempotent: a second release frees nothing more
    limiter.admit(alice, 1)
    refusal(limiter, alice)


def test_new_limits_apply_at_once_and_keep_what_was_used() -> None:
    clock = FakeClock()
    limiter = KeyLimiter(clock)
    limiter.admit(caller(KeyLimits(requests_per_minute=2)), 1).release()
    raised = caller(KeyLimits(requests_per_minute=4))
    for _ in range(3):  # 1 used of 4
        limiter.admit(raised, 1).release()
    refusal(limiter, raised)
    unlimited = caller(KeyLimits())
    for _ in range(100):
        limiter.admit(unlimited, 10**6).release()


def test_keys_have_their_own_buckets() -> None:
    limiter = KeyLimiter(FakeClock())
    limits = KeyLimits(requests_per_minute=1)
    limiter.admit(caller(limits, "k1"), 1)
    refusal(limiter, caller(limits, "k1"))
    limiter.admit(caller(limits, "k2"), 1)


def test_a_prompt_larger_than_the_bucket_waits_for_a_full_bucket_rather_than_forever() -> None:
    clock = FakeClock()
    bucket = TokenBucket.per_minute(60, clock())
    bucket.take(30, clock())
    assert bucket.wait(1000, clock()) == pytest.approx(30.0)


def test_the_prompt_estimate_is_a_quarter_of_its_characters() -> None:
    assert estimate_prompt_tokens("") == 1
    assert estimate_prompt_tokens("abcd") == 1
    assert estimate_prompt_tokens("abcde") == 2


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=20),
    gaps=st.lists(st.floats(min_value=0.0, max_value=10.0, allow_nan=False), min_size=1, max_size=80),
)
def test_no_window_admits_more_than_the_bucket_and_its_refill(limit: int, gaps: list[float]) -> None:
    """Over any span T, a requests-per-minute key admits at most `limit + limit * T / 60` requests, and a
    refused request admitted after exactly its Retry-After (the clock advanced by it) always gets in."""
    clock = FakeClock()
    limiter = KeyLimiter(clock)
    alice = caller(KeyLimits(requests_per_minute=limit))
    admitted: list[float] = []
    for gap in gaps:
        clock.advance(gap)
        try:
            limiter.admit(alice, 1).release()
        except RateLimitedError as error:
            clock.advance(error.retry_after)
            limiter.admit(alice, 1).release()
        admitted.append(clock.now)
    for i, start in enumerate(admitted):
        for j in range(i, len(admitted)):
            span = admitted[j] - start
            assert j - i + 1 <= limit + math.floor(limit * span / 60 + 1e-9)
