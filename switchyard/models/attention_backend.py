"""Which implementation attends over the paged KV cache: `--attention-backend {auto,sdpa,triton}`.

sdpa gathers each sequence's blocks and calls PyTorch's scaled_dot_product_attention (`models.attention`): it
runs everywhere and is the CPU path. triton reads the blocks in place in one kernel per layer
(`models.triton_attention`): the CUDA path. auto picks triton on CUDA when Triton is installed (the `gpu`
extra) and the cache is stored in the model's dtype, else sdpa.
"""

from __future__ import annotations

import importlib.util
import os

import torch

ATTENTION_BACKENDS = ("auto", "sdpa", "triton")
MIN_TRITON_BLOCK_SIZE = 4
"""Smallest KV block the kernel walks efficiently; smaller blocks stay on sdpa."""


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def resolve_attention_backend(
    name: str, device: torch.device, dtype: torch.dtype, kv_dtype: torch.dtype, block_size: int
) -> str:
    """ "sdpa" or "triton" for the requested `name`; ValueError when triton is asked for where it cannot run."""
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}, not {name!r}")
    if name == "sdpa":
        return "sdpa"
    problem = _triton_problem(device, dtype, kv_dtype, block_size)
    if name == "auto":
        # Only on CUDA: on CPU the kernel could run only in Triton's interpreter, a tool for tests.
        return "triton" if device.type == "cuda" and not problem else "sdpa"
    if problem:
        raise ValueError(f"attention_backend triton: {problem}")
    return "triton"


def _triton_problem(device: torch.device, dtype: torch.dtype, kv_dtype: torch.dtype, block_size: int) -> str:
    """Why the Triton kernel cannot serve this engine, or "" when it can."""
    if not triton_available():
        return "Triton is not installed (pip install 'switchyard[gpu]')"
    # On CPU the kernel runs only in Triton's interpreter: correct but slow, for tests.
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return "needs a CUDA device (or TRITON_INTERPRET=1 on CPU, for testing)"
    if kv_dtype != dtype:
        return f"needs the KV cache stored in the model's dtype ({dtype}), not {kv_dtype}"
    if block_size < MIN_TRITON_BLOCK_SIZE:
        return f"needs --block-size >= {MIN_TRITON_BLOCK_SIZE}"
    return ""
