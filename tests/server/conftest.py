"""Fixtures of the server tests: one shared server on loopback (see harness.py for how servers start)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from harness import RunningServer, start_server


@pytest.fixture(scope="package")
def server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    """The shared server: roomy queue, no timeout, no API key."""
    running = start_server(tiny_model_dir)
    yield running
    running.stop()


@pytest.fixture
def client(server: RunningServer) -> openai.OpenAI:
    return server.client()
