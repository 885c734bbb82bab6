"""The response cache's optional semantic mode: a deterministic request whose question means what a cached one's
did (embeddings close enough) gets that answer.

Off by default (`[response_cache.semantic]` turns it on). Only the question is compared: the last user message
of a chat request (its text), or a completion's prompt. Everything else (tenant, endpoint, model, the earlier
messages, tools, sampling parameters) must match exactly: it forms the bucket the question is searched in, so a
semantic hit never crosses tenants, models or settings. Embeddings come over HTTP from any OpenAI-compatible
`/v1/embeddings` (`switchyard rag serve-embeddings` serves the bundled MiniLM), so the gateway loads no model;
when that endpoint fails or is slow, the request is simply a miss.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.response_cache import cache_key

logger = logging.getLogger(__name__)

Embed = Callable[[str], Awaitable[np.ndarray]]


@dataclass(frozen=True)
class SemanticCacheConfig:
    """`[response_cache.semantic]`."""

    url: str
    """An OpenAI-compatible API root with /v1 (e.g. `switchyard rag serve-embeddings`' http://127.0.0.1:8100/v1)."""
    model: str = "all-MiniLM-L6-v2"
    similarity: float = 0.95
    """The cosine from which two questions count as the same."""
    api_key: str | None = None
    timeout: float = 2.0
    """Seconds an embedding may take before the request goes on as a miss."""
    max_question_chars: int = 4096
    """Longer questions are not embedded (they are looked up exactly only)."""

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise FleetConfigError(f"[response_cache.semantic] url must be an http(s) URL, got {self.url!r}")
        if not 0 < self.similarity <= 1 or not math.isfinite(self.similarity):
            raise FleetConfigError("[response_cache.semantic] similarity must be in (0, 1]")
        if self.timeout <= 0 or self.max_question_chars < 1:
            raise FleetConfigError(
                "[response_cache.semantic] timeout and max_question_chars must be positive"
            )


def semantic_config_from_mapping(table: Any) -> SemanticCacheConfig:
    if not isinstance(table, Mapping):
        raise FleetConfigError("[response_cache.semantic] must be a table")
    known = {"url", "model", "similarity", "api_key", "timeout", "max_question_chars"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise FleetConfigError(f"unknown setting(s) {', '.join(unknown)} in [response_cache.semantic]")
    if "url" not in table:
        raise FleetConfigError("[response_cache.semantic] needs the embeddings `url`")
    return SemanticCacheConfig(**table)


@dataclass(frozen=True)
class SemanticMatch:
    """A request's question, embedded, and the bucket it belongs to; `key` is a similar cached answer's key."""

    bucket: str
    vector: np.ndarray
    key: str | None


def question(endpoint: str, body: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(the question's text, the body without it) of a chat or completion request; None when it has none."""
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
            return None
        last = messages[-1]
        if last.get("role") != "user":
            return None
        text = _text(last.get("content"))
        if not text:
            return None
        rest = copy.deepcopy(dict(body))
        rest["messages"][-1]["content"] = ""
        return text, rest
    if endpoint == "completions":
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            return None
        return prompt, {key: value for key, value in body.items() if key != "prompt"}
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part.get("text") for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        ]
        if len(parts) == len(content):  # text only: an image or audio part is not a question to compare
            return "\n".join(str(part) for part in parts)
    return ""


class SemanticIndex:
    """Per bucket, the embedded questions of cached answers and those answers' exact keys."""

    def __init__(self, similarity: float, max_per_bucket: int = 4096) -> None:
        self.similarity = similarity
        self.max_per_bucket = max_per_bucket
        self._buckets: dict[str, list[tuple[np.ndarray, str]]] = {}

    def find(self, bucket: str, vector: np.ndarray) -> str | None:
        """The key of the most similar question at or above the threshold, or None."""
        entries = self._buckets.get(bucket)
        if not entries:
            return None
        scores = np.stack([stored for stored, _ in entries]) @ vector
        best = int(np.argmax(scores))
        return entries[best][1] if scores[best] >= self.similarity else None

    def add(self, bucket: str, vector: np.ndarray, key: str) -> None:
        entries = self._buckets.setdefault(bucket, [])
        entries[:] = [(stored, existing) for stored, existing in entries if existing != key]
        entries.append((vector, key))
        del entries[: max(0, len(entries) - self.max_per_bucket)]

    def discard(self, key: str) -> None:
        """Forget an answer that left the exact cache (expired or evicted)."""
        for bucket, entries in list(self._buckets.items()):
            entries[:] = [(stored, existing) for stored, existing in entries if existing != key]
            if not entries:
                del self._buckets[bucket]


class EmbeddingsClient:
    """One question embedded by the configured /v1/embeddings; normalised here, whatever the server returns."""

    def __init__(self, config: SemanticCacheConfig, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._http = http or httpx.AsyncClient(timeout=config.timeout)
        self._headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}

    async def __call__(self, text: str) -> np.ndarray:
        response = await self._http.post(
            f"{self.config.url.rstrip('/')}/embeddings",
            json={"model": self.config.model, "input": text},
            headers=self._headers,
        )
        response.raise_for_status()
        vector = np.asarray(response.json()["data"][0]["embedding"], dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        if not norm or not math.isfinite(norm):
            raise ValueError("the embeddings endpoint returned a zero or non-finite vector")
        return vector / norm

    async def aclose(self) -> None:
        await self._http.aclose()


class SemanticCache:
    """What the gatekeeper asks on an exact miss, and tells when it stores an answer."""

    def __init__(self, config: SemanticCacheConfig, embed: Embed, max_per_bucket: int = 4096) -> None:
        self.config = config
        self._embed = embed
        self.index = SemanticIndex(config.similarity, max_per_bucket)

    async def find(self, namespace: str, endpoint: str, body: Mapping[str, Any]) -> SemanticMatch | None:
        """The question embedded with its bucket, and a similar cached answer's key if there is one; None when
        the request has no question to compare or the embedding failed (then it is a plain miss)."""
        found = question(endpoint, body)
        if found is None or len(found[0]) > self.config.max_question_chars:
            return None
        text, rest = found
        try:
            vector = await self._embed(text)
        except Exception as exc:  # the cache is an optimisation: its failure is a miss, never an error
            logger.warning("semantic cache: embedding failed (%s); answered as a miss", exc)
            return None
        bucket = cache_key(namespace, endpoint, rest)
        return SemanticMatch(bucket, vector, self.index.find(bucket, vector))

    def remember(self, match: SemanticMatch | None, key: str) -> None:
        if match is not None:
            self.index.add(match.bucket, match.vector, key)
