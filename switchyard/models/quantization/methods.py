"""The quantization methods the engine implements, and one method's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

QuantizationMethod = Literal["int8", "w8a8", "int4"]
QUANTIZATION_METHODS: tuple[QuantizationMethod, ...] = ("int8", "w8a8", "int4")

QUANTIZED_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
"""The decoder projections that are quantized (the LM head and embeddings are not: they stay in dtype)."""


@dataclass(frozen=True)
class QuantizationSpec:
    """`--quantization METHOD`, or what a quantized checkpoint's config says."""

    method: QuantizationMethod
    group_size: int = 128
    """int4's group along the input dimension (each group has its own scale and zero point)."""
    prequantized: bool = False
    """The checkpoint stores the codes: layers are built from them and never rounded again, and a layer it
    stores unquantized (or that the kernel cannot take as stored) stays in the model's dtype."""

    def __post_init__(self) -> None:
        if self.method not in QUANTIZATION_METHODS:
            raise ValueError(
                f"quantization {self.method!r} is not implemented; use one of {', '.join(QUANTIZATION_METHODS)}"
            )
        if self.group_size < 32 or self.group_size & (self.group_size - 1):
            raise ValueError(f"group_size must be a power of two >= 32, got {self.group_size}")
