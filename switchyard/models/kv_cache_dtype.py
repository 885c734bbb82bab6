"""The dtype KV cache entries are stored in, which may be narrower than the one the model computes in.

KV memory decides how many sequences run at once, and decode attention reads every cached entry each step. A
bf16 cache under float32 compute (the dtype `auto` picks on a CPU without native bf16) halves both; fp8 halves
them again. Entries are narrowed when written and widened to the compute dtype right after they are gathered,
so attention itself runs in the model's dtype. fp8 uses a scale of 1 (as vLLM does without calibration
scales): e4m3 keeps 3 mantissa bits up to +-448, e5m2 2 bits up to +-57344; values beyond the range are
clamped, never turned into NaN. Names follow vLLM's `--kv-cache-dtype`.
"""

from __future__ import annotations

import torch

KV_CACHE_DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
"""`--kv-cache-dtype` names; auto stores entries in the model's dtype."""

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def resolve_kv_cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """The storage dtype `name` means next to a model computing in `model_dtype`; ValueError for unknown names."""
    try:
        dtype = KV_CACHE_DTYPES[name]
    except KeyError:
        raise ValueError(
            f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not {name!r}"
        ) from None
    return model_dtype if dtype is None else dtype


def narrow(x: torch.Tensor, cache_dtype: torch.dtype) -> torch.Tensor:
    """`x` as the cache stores it: fp8 values clamped to the format's range first (out of range they become NaN)."""
    if x.dtype == cache_dtype:
        return x
    if cache_dtype in FP8_DTYPES:
        limit = torch.finfo(cache_dtype).max
        return x.clamp(-limit, limit).to(cache_dtype)
    return x.to(cache_dtype)


def as_stored(x: torch.Tensor, cache_dtype: torch.dtype) -> torch.Tensor:
    """`x` rounded as the cache would store it, in its own dtype (itself when the cache is as wide)."""
    return x if x.dtype == cache_dtype else narrow(x, cache_dtype).to(x.dtype)


def copyable(cache: torch.Tensor) -> torch.Tensor:
    """A view of `cache` that `index_copy_` accepts: fp8 as raw bytes (PyTorch's CPU index_copy_ has no fp8)."""
    return cache.view(torch.uint8) if cache.dtype in FP8_DTYPES else cache
