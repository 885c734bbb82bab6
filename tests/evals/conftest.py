"""Fixtures of the evals tests: a real server on loopback (a tiny random model) and the bundled MiniLM embedder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from server.harness import RunningServer, start_tool_server


@pytest.fixture(scope="package")
def eval_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A tiny Llama with a 1024-token context (agent cases send tool schemas), served as "tiny"."""
    running = start_tool_server(tmp_path_factory.mktemp("eval-tiny"))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def minilm():  # type: ignore[no-untyped-def]
    from switchyard.agents.rag.embeddings import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm up"])
    return embedder
