"""Shared fixtures: small random-initialised models saved as Hugging Face folders (no hub needed)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    # Without a GPU, Triton kernels (`models.triton_attention`) run in Triton's interpreter. The switch is read
    # when Triton is first imported, which the imports below may do (through transformers).
    os.environ.setdefault("TRITON_INTERPRET", "1")

from model_factory import build_hf_model
from tokenizer_factory import build_tokenizer

# Test models are tiny: one intra-op thread is as fast, and it keeps OpenMP from stalling at barriers when
# the server tests run an engine thread, an event loop and a client in one process.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama (vocab 320, 2 layers) with a trained tokenizer and chat template."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    build_hf_model("llama", folder, seed=0)
    build_tokenizer(folder, vocab_size=320)
    return folder


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-qwen3")
    build_hf_model("qwen3", folder, seed=1)
    build_tokenizer(folder, vocab_size=320)
    return folder


@pytest.fixture
def exact_cpu_kernels(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """PyTorch's own kernels for quantized layers built in this test: the native decode kernels quantize
    activations per block (as llama.cpp's q8_0 does), so tests of exact weights against a reference opt out."""
    from switchyard.models.cpu_kernels.native_library import DISABLE_ENV, native_kernels

    monkeypatch.setenv(DISABLE_ENV, "0")
    native_kernels.cache_clear()
    yield
    native_kernels.cache_clear()
