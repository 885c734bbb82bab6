"""Fixtures of the model tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(scope="module")
def single_thread() -> Iterator[None]:
    """The tiny models' matmuls take microseconds; with several intra-op threads on a shared CPU the thread
    hand-offs cost 10-30x the arithmetic. One thread for the module that asks, restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
