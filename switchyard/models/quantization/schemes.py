"""What a pre-quantized checkpoint's `quantization_config` says, read without torch (the planner reads it too).

Loaded: compressed-tensors int8 / w8a8 (as `switchyard quantize` writes them), compressed-tensors
`pack-quantized` int4 (W4A16, group or channel, with or without zero points) and `float-quantized` fp8 (weights
per tensor or channel), GPTQ (4 or 8 bits, any group, `desc_act`) and AWQ GEMM (4 bits). Everything else is
refused by name: loading it as plain weights would silently drop its scales.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from switchyard.errors import ModelLoadError

COMPRESSED_TENSORS = "compressed-tensors"
INT_FORMAT = "int-quantized"
PACKED_FORMAT = "pack-quantized"
FLOAT_FORMAT = "float-quantized"

SchemeKind = Literal["int8", "w8a8", "gptq", "awq", "packed-int4", "fp8"]


class UnsupportedQuantizationError(ModelLoadError):
    """The checkpoint is quantized in a scheme the engine does not implement."""


@dataclass(frozen=True)
class CheckpointScheme:
    """How a checkpoint stores its decoder projections."""

    kind: SchemeKind
    bits: int = 8
    group_size: int | None = None
    """Inputs sharing one scale (and zero point); None: one per output channel."""
    symmetric: bool = True
    zeros_stored_minus_one: bool = False
    """Classic GPTQ (`checkpoint_format` "gptq") packs each zero point minus 1; "gptq_v2" packs it as is."""

    @property
    def engine_method(self) -> str | None:
        """The engine's layer kind for these weights: int4 kept as int4 codes, int8 as int8; None: dequantized
        to the model's dtype at load (fp8 and 8-bit GPTQ on CPU, which has no kernel for them)."""
        if self.kind in ("int8", "w8a8"):
            return self.kind
        return "int4" if self.bits == 4 else None

    @property
    def planned_method(self) -> str:
        """What `switchyard plan --quantization auto` counts for this folder's projection weights: what the engine
        holds, so fp8 and 8-bit GPTQ (dequantized at load) count in the model's dtype."""
        method = self.engine_method
        return "none" if method is None else "int8" if method == "w8a8" else method


def parse_quantization_config(raw: Mapping[str, Any], where: str) -> CheckpointScheme | None:
    """The scheme of a parsed config.json (None: not quantized); UnsupportedQuantizationError naming it."""
    config = raw.get("quantization_config") or raw.get("compression_config")
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise UnsupportedQuantizationError("quantization_config is not a table", where)
    method = str(config.get("quant_method", "<no quant_method>")).lower()
    if method == "gptq":
        return _gptq(config, where)
    if method == "awq":
        return _awq(config, where)
    if method == COMPRESSED_TENSORS:
        return _compressed_tensors(config, where)
    raise UnsupportedQuantizationError(
        f"quantization {_describe(config)} is not implemented: Switchyard loads GPTQ (4/8-bit), AWQ GEMM "
        "(4-bit) and compressed-tensors (int8, w8a8, pack-quantized int4, float-quantized fp8) checkpoints; "
        "or give --quantization int8|w8a8|int4 with an unquantized checkpoint",
        where,
    )


def _gptq(config: Mapping[str, Any], where: str) -> CheckpointScheme:
    bits = config.get("bits")
    group = config.get("group_size", 128)
    checkpoint_format = str(config.get("checkpoint_format", "gptq")).lower()
    if bits not in (4, 8) or config.get("is_marlin_format") or checkpoint_format not in ("gptq", "gptq_v2"):
        raise UnsupportedQuantizationError(
            f"quantization {_describe(config)} checkpoint_format={checkpoint_format} is not implemented (GPTQ "
            "loads with 4 or 8 bits in the gptq or gptq_v2 layout; marlin-only layouts are refused)",
            where,
        )
    return CheckpointScheme(
        "gptq",
        bits=bits,
        group_size=_group(group, where),
        symmetric=bool(config.get("sym", True)),
        zeros_stored_minus_one=checkpoint_format == "gptq",
    )


def _awq(config: Mapping[str, Any], where: str) -> CheckpointScheme:
    bits = config.get("bits", config.get("w_bit"))
    version = str(config.get("version", "gemm")).lower()
    if bits != 4 or version != "gemm":
        raise UnsupportedQuantizationError(
            f"quantization {_describe(config)} version={version} is not implemented (AWQ loads 4-bit GEMM "
            "checkpoints)",
            where,
        )
    group = config.get("group_size", config.get("q_group_size", 128))
    return CheckpointScheme("awq", bits=4, group_size=_group(group, where), symmetric=False)


def _group(group: object, where: str) -> int | None:
    if group == -1:
        return None
    if not isinstance(group, int) or group < 32 or group & (group - 1):
        raise UnsupportedQuantizationError(
            f"group_size {group!r} is not implemented (a power of two >= 32, or -1 per channel)", where
        )
    return group


def _compressed_tensors(config: Mapping[str, Any], where: str) -> CheckpointScheme:
    groups = config.get("config_groups") or {}
    if len(groups) != 1:
        raise UnsupportedQuantizationError(
            f"compressed-tensors with {len(groups)} config groups is not implemented (one group)", where
        )
    (group,) = groups.values()
    form = group.get("format") or config.get("format") or INT_FORMAT
    weights = dict(group.get("weights") or {})
    activations = group.get("input_activations")
    found = (weights.get("num_bits"), weights.get("type"), weights.get("strategy"))
    if form == INT_FORMAT and found == (8, "int", "channel") and weights.get("symmetric"):
        return _int8(activations, where)
    if (
        form == PACKED_FORMAT
        and found[:2] == (4, "int")
        and found[2] in ("group", "channel")
        and not activations
    ):
        size = weights.get("group_size") if found[2] == "group" else -1
        return CheckpointScheme(
            "packed-int4",
            bits=4,
            group_size=_group(size, where),
            symmetric=bool(weights.get("symmetric", True)),
        )
    if form == FLOAT_FORMAT and found[:2] == (8, "float") and found[2] in ("tensor", "channel"):
        if activations and (activations.get("num_bits"), activations.get("type")) != (8, "float"):
            raise UnsupportedQuantizationError(f"fp8 weights with activations {dict(activations)}", where)
        return CheckpointScheme("fp8", bits=8)
    raise UnsupportedQuantizationError(
        f"compressed-tensors format {form!r} with weights {weights} and input activations {activations} is not "
        "implemented (int-quantized 8-bit per channel, pack-quantized 4-bit group/channel weights only, or "
        "float-quantized fp8 per tensor/channel)",
        where,
    )


def _int8(activations: Mapping[str, Any] | None, where: str) -> CheckpointScheme:
    if activations is None:
        return CheckpointScheme("int8")
    found = (activations.get("num_bits"), activations.get("type"), activations.get("dynamic"))
    if found != (8, "int", True) or activations.get("strategy") != "token":
        raise UnsupportedQuantizationError(
            f"compressed-tensors input activations {dict(activations)} are not implemented (only dynamic "
            "per-token int8; static activation scales are refused)",
            where,
        )
    return CheckpointScheme("w8a8")


def _describe(config: Mapping[str, Any]) -> str:
    details = [str(config.get("quant_method"))]
    for key in ("bits", "w_bit", "fmt", "format", "group_size", "q_group_size", "version"):
        if key in config:
            details.append(f"{key}={config[key]}")
    return " ".join(details)
