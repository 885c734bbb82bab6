"""The gateway's response cache: the same deterministic request from the same tenant answered again without a
replica.

Exact match here; semantic_cache.py adds the optional semantic mode (a question embedded and compared with
cached ones). The key is the SHA-256 of the tenant and the canonical request: the endpoint and the whole body
as normalised JSON (sorted keys, integral floats as integers, so `"temperature": 0.0` and `0` are one key),
without the fields that do not change the answer (`user`, `priority`). The tenant is part of the key, so two
tenants never see each other's answers. Only deterministic requests are cached: `temperature` 0, or a fixed
`seed`; anything else (no temperature means the model's default sampling) is not.

A stream is cached as the events it sent, when it completed, and a hit replays them at once, as one
response with the same events (so `stream_options.include_usage` and the Responses API's named events come
back as they were). Streamed and non-streamed requests have different keys.

`Cache-Control: no-cache` skips the lookup (the answer is fresh, and stored); `no-store` neither looks up nor
stores. Entries expire after `ttl` seconds; beyond `max_entries` or `max_bytes` the least recently used go.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.fleet.errors import FleetConfigError

CACHE_HEADER = "x-switchyard-cache"
"""On every answer of a gateway with the cache on: hit, semantic-hit, miss, bypass (no-cache/no-store) or
uncacheable."""
_IGNORED_FIELDS = frozenset({"user", "priority"})


@dataclass(frozen=True)
class ResponseCacheConfig:
    ttl: float = 300.0
    """Seconds an answer is served from the cache."""
    max_entries: int = 4096
    max_bytes: int = 64 << 20
    """The cached bodies' total size; an answer larger than this is not cached."""

    def __post_init__(self) -> None:
        if self.ttl <= 0 or self.max_entries < 1 or self.max_bytes < 1:
            raise FleetConfigError("the response cache needs ttl > 0, max_entries >= 1 and max_bytes >= 1")


@dataclass(frozen=True)
class CachedResponse:
    body: bytes
    media_type: str
    stored_at: float


@dataclass(frozen=True)
class CacheDirective:
    """What the client's Cache-Control allows."""

    look_up: bool = True
    store: bool = True

    @classmethod
    def from_header(cls, value: str | None) -> CacheDirective:
        directives = {part.strip().lower() for part in (value or "").split(",")}
        if "no-store" in directives:
            return cls(look_up=False, store=False)
        if "no-cache" in directives:
            return cls(look_up=False, store=True)
        return cls()


def is_deterministic(body: Mapping[str, Any]) -> bool:
    """Temperature 0, or a fixed seed: the same request gives the same answer."""
    temperature = body.get("temperature")
    seed = body.get("seed")
    greedy = isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature == 0
    seeded = isinstance(seed, int) and not isinstance(seed, bool)
    return greedy or seeded


def cache_key(tenant: str, endpoint: str, body: Mapping[str, Any]) -> str:
    """The request's key: its tenant, endpoint and normalised body."""
    canonical = {key: _normalised(value) for key, value in body.items() if key not in _IGNORED_FIELDS}
    document = json.dumps(
        {"tenant": tenant, "endpoint": endpoint, "body": canonical},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(document.encode()).hexdigest()


def _normalised(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: _normalised(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalised(item) for item in value]
    return value


class ResponseCache:
    """A bounded LRU of answers with a time to live; time comes from `clock`, so tests control expiry."""

    def __init__(self, config: ResponseCacheConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._entries: OrderedDict[str, CachedResponse] = OrderedDict()
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> CachedResponse | None:
        """The live entry for `key` (now the most recently used), or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() - entry.stored_at >= self.config.ttl:
            self._remove(key)
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, key: str, body: bytes, media_type: str) -> None:
        """Store an answer, evicting the least recently used beyond the bounds; too large an answer is dropped."""
        if len(body) > self.config.max_bytes:
            return
        if key in self._entries:
            self._remove(key)
        self._entries[key] = CachedResponse(body, media_type, self._clock())
        self.size_bytes += len(body)
        while len(self._entries) > self.config.max_entries or self.size_bytes > self.config.max_bytes:
            self._remove(next(iter(self._entries)))

    def _remove(self, key: str) -> None:
        self.size_bytes -= len(self._entries.pop(key).body)
