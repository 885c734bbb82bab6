"""Each key's limits at the gateway: requests per minute, tokens per minute, concurrent requests.

`admit` decides at arrival, from the key's own buckets: a request needs one unit of the requests bucket and
its estimated prompt tokens of the tokens bucket, and a free concurrency slot. Refused, it gets
RateLimitedError (429) with the seconds until its buckets hold enough again (Retry-After); admitted, it gets a
Lease that draws output tokens as they stream, corrects the prompt estimate to the count the replica
reported, and returns the slot when the request ends.

The prompt estimate is the prompt text's length / 4 (the usual characters per token of English), not its
tokenization: the gateway admits before any tokenizer runs. The exact count replaces it when the request
finishes, so the estimate's error lasts one request.

State is per gateway process and kept in memory: several gateways in front of the same tenants each enforce
the full limits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from switchyard.fleet.errors import RateLimitedError
from switchyard.fleet.tenancy.records import Caller, KeyLimits
from switchyard.fleet.tenancy.token_bucket import TokenBucket
from switchyard.fleet.usage import TokenUsage

CHARACTERS_PER_TOKEN = 4
CONCURRENCY_RETRY_AFTER = 1.0
"""Seconds a request refused for too many concurrent requests is told to wait: no bucket predicts when one of
the others ends."""


def estimate_prompt_tokens(prompt_text: str) -> int:
    return max(1, math.ceil(len(prompt_text) / CHARACTERS_PER_TOKEN))


@dataclass
class _KeyState:
    limits: KeyLimits
    requests: TokenBucket | None
    tokens: TokenBucket | None
    in_flight: int = 0


class Lease:
    """An admitted request's hold on its key's limits, until `release`."""

    def __init__(self, state: _KeyState, prompt_estimate: int, clock: Callable[[], float]) -> None:
        self._state = state
        self._clock = clock
        self._prompt_charged = prompt_estimate
        self._output_charged = 0
        self._released = False

    def charge_output(self, tokens: int) -> None:
        """Output tokens just streamed."""
        if tokens and self._state.tokens is not None:
            self._state.tokens.take(tokens, self._clock())
        self._output_charged += tokens

    def settle(self, usage: TokenUsage | None) -> None:
        """Correct what was charged to the replica's count (None: it reported none; the charges stand)."""
        if usage is None:
            return
        difference = (usage.prompt_tokens - self._prompt_charged) + (
            usage.output_tokens - self._output_charged
        )
        if difference and self._state.tokens is not None:
            self._state.tokens.take(difference, self._clock())
        self._prompt_charged, self._output_charged = usage.prompt_tokens, usage.output_tokens

    def release(self) -> None:
        """The request ended: its concurrency slot is free (idempotent)."""
        if not self._released:
            self._released = True
            self._state.in_flight -= 1


class KeyLimiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._keys: dict[str, _KeyState] = {}

    def admit(self, caller: Caller, prompt_tokens: int) -> Lease:
        """A lease on the caller's key for a request of `prompt_tokens` (estimated); RateLimitedError if over."""
        now = self._clock()
        state = self._state(caller, now)
        limits = state.limits
        name = f"tenant {caller.tenant.name!r} (key {caller.key.shown_prefix}...)"
        if limits.max_concurrent is not None and state.in_flight >= limits.max_concurrent:
            raise RateLimitedError(
                f"Rate limit reached for {name} on concurrent requests: limit {limits.max_concurrent}. "
                "Retry when one of them has finished.",
                "requests",
                CONCURRENCY_RETRY_AFTER,
            )
        request_wait = state.requests.wait(1, now) if state.requests is not None else 0.0
        token_wait = state.tokens.wait(prompt_tokens, now) if state.tokens is not None else 0.0
        if request_wait > 0 or token_wait > 0:
            wait = max(request_wait, token_wait)
            if request_wait >= token_wait:
                what, limit, kind = "requests per minute", limits.requests_per_minute, "requests"
            else:
                what, limit, kind = "tokens per minute", limits.tokens_per_minute, "tokens"
            raise RateLimitedError(
                f"Rate limit reached for {name} on {what}: limit {limit}. Try again in {math.ceil(wait)} s.",
                kind,
                wait,
            )
        if state.requests is not None:
            state.requests.take(1, now)
        if state.tokens is not None:
            state.tokens.take(prompt_tokens, now)
        state.in_flight += 1
        return Lease(state, prompt_tokens, self._clock)

    def _state(self, caller: Caller, now: float) -> _KeyState:
        """The key's buckets, rebuilt when its limits changed in the store (keeping what was used)."""
        limits = caller.key.limits
        state = self._keys.get(caller.key.key_id)
        if state is None:
            state = _KeyState(
                limits, _bucket(limits.requests_per_minute, now), _bucket(limits.tokens_per_minute, now)
            )
            self._keys[caller.key.key_id] = state
        elif state.limits != limits:
            state.requests = _bucket(limits.requests_per_minute, now, state.requests)
            state.tokens = _bucket(limits.tokens_per_minute, now, state.tokens)
            state.limits = limits
        return state


def _bucket(limit: int | None, now: float, previous: TokenBucket | None = None) -> TokenBucket | None:
    """A bucket for `limit` per minute; with `previous`, what was used of that one stays used."""
    if limit is None:
        return None
    used = previous.capacity - previous.level(now) if previous is not None else 0.0
    return TokenBucket.per_minute(limit, now, limit - used)
