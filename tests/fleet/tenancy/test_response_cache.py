"""The response cache on its own: canonical keys, what is deterministic, Cache-Control, TTL and LRU bounds."""

from __future__ import annotations

import pytest

from switchyard.errors import SwitchyardError
from switchyard.fleet.response_cache import (
    CacheDirective,
    ResponseCache,
    ResponseCacheConfig,
    cache_key,
    is_deterministic,
)

BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 5}


def test_the_key_is_the_normalised_request_of_one_tenant() -> None:
    same = {
        "max_tokens": 5.0,
        "temperature": 0.0,
        "messages": [{"content": "hi", "role": "user"}],
        "model": "chat",
    }
    assert cache_key("alice", "chat", BODY) == cache_key("alice", "chat", same)
    assert cache_key("alice", "chat", BODY) == cache_key(
        "alice", "chat", {**BODY, "user": "x", "priority": 3}
    )
    assert cache_key("alice", "chat", BODY) != cache_key("bob", "chat", BODY)
    assert cache_key("alice", "chat", BODY) != cache_key("alice", "completions", BODY)
    assert cache_key("alice", "chat", BODY) != cache_key("alice", "chat", {**BODY, "max_tokens": 6})
    assert cache_key("alice", "chat", BODY) != cache_key("alice", "chat", {**BODY, "stream": True})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert cache_key("alice", "chat", BODY) != cache_key("alice", "chat", {**BODY, "tools": tools})


def test_only_greedy_or_seeded_requests_are_deterministic() -> None:
    assert is_deterministic({"temperature": 0})
    assert is_deterministic({"temperature": 0.0})
    assert is_deterministic({"temperature": 0.8, "seed": 7})
    assert not is_deterministic({})
    assert not is_deterministic({"temperature": 0.7})
    assert not is_deterministic({"temperature": False, "seed": True})


def test_cache_control() -> None:
    assert CacheDirective.from_header(None) == CacheDirective(look_up=True, store=True)
    assert CacheDirective.from_header("no-cache") == CacheDirective(look_up=False, store=True)
    assert CacheDirective.from_header("max-age=0, No-Store") == CacheDirective(look_up=False, store=False)


def test_entries_expire_after_their_ttl() -> None:
    now = [0.0]
    cache = ResponseCache(ResponseCacheConfig(ttl=10.0), clock=lambda: now[0])
    cache.put("k", b"answer", "application/json")
    now[0] = 9.9
    entry = cache.get("k")
    assert entry is not None and entry.body == b"answer"
    now[0] = 10.0
    assert cache.get("k") is None
    assert len(cache) == 0 and cache.size_bytes == 0


def test_the_least_recently_used_go_beyond_the_bounds() -> None:
    cache = ResponseCache(ResponseCacheConfig(max_entries=2, max_bytes=10), clock=lambda: 0.0)
    cache.put("a", b"1111", "x")
    cache.put("b", b"2222", "x")
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", b"3333", "x")
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    cache.put("d", b"4444444", "x")  # three entries, and 4 + 4 + 7 > 10 bytes: the two least recent go
    assert cache.get("a") is None and cache.get("c") is None and cache.get("d") is not None
    assert cache.size_bytes == 7
    cache.put("huge", b"x" * 11, "x")
    assert cache.get("huge") is None and cache.get("d") is not None


def test_bounds_are_checked() -> None:
    with pytest.raises(SwitchyardError):
        ResponseCacheConfig(ttl=0)
