"""RAG/memory fixtures: the bundled MiniLM embedder (loaded once)."""

from __future__ import annotations

import pytest

from switchyard.agents.rag.embeddings import MiniLMEmbedder


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    embedder = MiniLMEmbedder()
    embedder.embed(["warm up"])
    return embedder
