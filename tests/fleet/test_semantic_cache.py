"""The semantic cache's parts: which part of a request is the question, the index's threshold and buckets, and
an embedding failure answered as a miss."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.semantic_cache import (
    SemanticCache,
    SemanticCacheConfig,
    SemanticIndex,
    question,
    semantic_config_from_mapping,
)


def unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_the_question_is_the_last_user_text_and_the_rest_must_match() -> None:
    body = {
        "model": "m",
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital of France?"},
        ],
    }
    text, rest = question("chat", body)  # type: ignore[misc]
    assert text == "Capital of France?"
    assert rest["messages"][-1]["content"] == "" and rest["messages"][0]["content"] == "Be brief."
    assert body["messages"][-1]["content"] == "Capital of France?"  # the request itself is left alone
    parts = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ]
    }
    assert question("chat", parts)[0] == "a\nb"  # type: ignore[index]
    image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
    assert question("chat", image) is None
    assert question("chat", {"messages": [{"role": "assistant", "content": "hi"}]}) is None
    assert question("completions", {"prompt": "Once", "max_tokens": 3}) == ("Once", {"max_tokens": 3})
    assert question("completions", {"prompt": [1, 2, 3]}) is None
    assert question("responses", {"input": "x"}) is None


def test_the_index_answers_only_at_or_above_the_threshold_and_within_a_bucket() -> None:
    index = SemanticIndex(similarity=0.9)
    index.add("bucket", unit(1, 0, 0), "paris")
    index.add("bucket", unit(0, 1, 0), "berlin")
    assert index.find("bucket", unit(1, 0.1, 0)) == "paris"  # cosine 0.995
    assert index.find("bucket", unit(1, 1, 0)) is None  # cosine 0.707 to either
    assert index.find("other-bucket", unit(1, 0, 0)) is None
    index.discard("paris")
    assert index.find("bucket", unit(1, 0, 0)) is None


def test_a_failed_embedding_is_a_miss_not_an_error() -> None:
    async def broken(_: str) -> np.ndarray:
        raise ConnectionError("embeddings endpoint down")

    cache = SemanticCache(SemanticCacheConfig(url="http://127.0.0.1:9/v1"), broken)
    body = {"messages": [{"role": "user", "content": "hello"}], "temperature": 0}
    assert asyncio.run(cache.find("tenant", "chat", body)) is None


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(FleetConfigError, match="needs the embeddings `url`"):
        semantic_config_from_mapping({"similarity": 0.9})
    with pytest.raises(FleetConfigError, match="unknown setting"):
        semantic_config_from_mapping({"url": "http://x/v1", "threshold": 0.9})
    with pytest.raises(FleetConfigError, match=r"similarity must be in \(0, 1\]"):
        SemanticCacheConfig(url="http://x/v1", similarity=1.5)
    with pytest.raises(FleetConfigError, match="http"):
        SemanticCacheConfig(url="x/v1")
