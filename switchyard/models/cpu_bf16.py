"""Whether this CPU computes bfloat16 at speed, and the dtype to run a checkpoint in when the user says "auto".

bf16 is the fast dtype only on CPUs whose oneDNN kernels take it natively (AVX-512 BW/VL/DQ, AVX-NE-CONVERT,
AMX). Elsewhere, AVX2-only x86 parts for instance, PyTorch falls back to scalar conversions: measured on a
2-core AVX2 machine, a [4608, 256] x [256, 1024] product took 40 ms in float32 and 4050 ms in bf16, and one
training step of the bundled model 4.8 s against 71 s under bf16 autocast. oneDNN's packed bf16 weights refuse
to build there at all. So "auto" keeps a bf16 checkpoint in bf16 where that pays and widens it to float32 where
it does not, as a user asking for the fast default would expect.
"""

from __future__ import annotations

import functools
import logging

import torch

logger = logging.getLogger(__name__)


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True when oneDNN runs bf16 matrix products natively on this CPU (the check PyTorch itself uses)."""
    if not torch.backends.mkldnn.is_available():
        return False
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check()) if check is not None else False


def auto_dtype(checkpoint_dtype: str | None, device: torch.device, native_bf16: bool | None = None) -> str:
    """The dtype "auto" means for a checkpoint stored in `checkpoint_dtype` on `device`.

    The checkpoint's own dtype, except that half-precision checkpoints run in float32 on a CPU without native
    bf16 (both bf16 and fp16 matrix products are emulated there). `native_bf16` overrides the probe (tests).
    """
    name = checkpoint_dtype if checkpoint_dtype in ("float32", "bfloat16", "float16") else "float32"
    if device.type != "cpu" or name == "float32":
        return name
    native = cpu_has_native_bf16() if native_bf16 is None else native_bf16
    if native:
        return name
    logger.info(
        "dtype auto: the checkpoint is %s, but this CPU has no native bf16/fp16 matrix products; "
        "running in float32 (pass --dtype %s to force it)",
        name,
        name,
    )
    return "float32"
