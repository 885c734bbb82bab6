"""A decode step's decoder layers as one native call (cpu_kernels/decode_layers.c), where the model allows it.

At batch 1 on two cores a Llama layer dispatches ~100 PyTorch operators around its five products, and the
operators with the Python between them cost about half a millisecond a layer: 12-15 ms of a 36 ms int8 step
(benchmarks/decode_breakdown.py). The C side runs the same products back to back with the glue (norms, rotary
embedding, KV write, paged attention, SwiGLU, residual adds) in between, rounding where PyTorch rounds.

It applies to dense Llama-family layers (no expert mixture, no q/k norm, no sliding window) on the CPU with
bf16 activations and a bf16 KV cache, whose projections are all native-kernel layers (bf16 with
`--max-num-seqs` <= 8, int8, w8a8 or int4), and to pure decode steps of up to `skinny_matmul.MAX_ROWS`
sequences. Everything else, and any step the native call declines, takes the operator-by-operator path.
"""

from __future__ import annotations

import ctypes
import logging

import torch
from torch import nn

from switchyard.models.attention import AttentionMetadata
from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.native_library import NativeKernels, native_kernels
from switchyard.models.cpu_kernels.skinny_matmul import NativeProjection

logger = logging.getLogger(__name__)

_KINDS = {"bf16": 0, "int8": 1, "int4": 2}
_MAX_HEAD_DIM = 128
_MAX_GROUP = 16
_NORM_DTYPES = (torch.bfloat16, torch.float32)


class _Projection(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("group", ctypes.c_int64),
        ("weight", ctypes.c_void_p),
        ("aux1", ctypes.c_void_p),
        ("aux2", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
    ]


class _Layer(ctypes.Structure):
    _fields_ = [
        ("input_norm", ctypes.c_void_p),
        ("post_norm", ctypes.c_void_p),
        ("qkv", _Projection),
        ("o", _Projection),
        ("gate_up", _Projection),
        ("down", _Projection),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
    ]


class _Batch(ctypes.Structure):
    _fields_ = [
        ("rows", ctypes.c_int64),
        ("hidden", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("intermediate", ctypes.c_int64),
        ("block_size", ctypes.c_int64),
        ("table_width", ctypes.c_int64),
        ("block_tables", ctypes.c_void_p),
        ("context_lens", ctypes.c_void_p),
        ("slots", ctypes.c_void_p),
        ("cos", ctypes.c_void_p),
        ("sin", ctypes.c_void_p),
        ("norm_bf16", ctypes.c_int64),
        ("eps", ctypes.c_float),
        ("scale", ctypes.c_float),
    ]


def _projection(module: nn.Module, in_features: int) -> _Projection | None:
    describe = getattr(module, "native_projection", None)
    found: NativeProjection | None = describe() if describe is not None else None
    if found is None or found.in_features != in_features:
        return None
    return _Projection(
        _KINDS[found.kind],
        found.out_features,
        found.in_features,
        found.group,
        found.weight.data_ptr(),
        None if found.aux1 is None else found.aux1.data_ptr(),
        None if found.aux2 is None else found.aux2.data_ptr(),
        None if found.bias is None else found.bias.data_ptr(),
    )


class NativeDecoder:
    """The decoder layers of one model as `sy_decode_layers` calls. Holds raw pointers into the modules'
    weights (which the model keeps alive and never moves after load) and into the KV caches, re-read whenever
    the caches change."""

    def __init__(
        self, kernels: NativeKernels, layers: list[_Layer], shape: dict[str, int], eps: float, norm_bf16: bool
    ) -> None:
        """`layers`: each decoder layer's norms and projections (KV-cache pointers are filled per step)."""
        self._kernels = kernels
        self._array = (_Layer * len(layers))(*layers)
        self._kv_shape = (shape["kv_heads"], shape["head_dim"])
        self._cache_key: tuple[int, ...] = ()
        self._batch = _Batch()
        batch = self._batch
        batch.hidden = shape["hidden"]
        batch.heads = shape["heads"]
        batch.kv_heads = shape["kv_heads"]
        batch.head_dim = shape["head_dim"]
        batch.intermediate = shape["intermediate"]
        batch.norm_bf16 = int(norm_bf16)
        batch.eps = eps
        batch.scale = shape["head_dim"] ** -0.5

    @classmethod
    def for_model(cls, model: nn.Module) -> NativeDecoder | None:
        """The native decoder of a `LlamaForCausalLM`, or None where its layers do not qualify (the reason is
        logged at debug level: most models on most machines simply do not)."""
        # Imported here: llama.py imports this module.
        from switchyard.models.llama import Attention, LlamaForCausalLM, RMSNorm
        from switchyard.models.moe import DenseMLP

        assert isinstance(model, LlamaForCausalLM)
        config = model.config
        kernels = native_kernels()
        why = None
        if kernels is None:
            why = "no native kernels"
        elif config.moe is not None or config.qk_norm or config.sliding_window or config.layer_windows:
            why = "an expert mixture, q/k norms or a sliding window"
        elif model.model.embed_tokens.weight.dtype != torch.bfloat16:
            why = "activations are not bf16"
        elif model.model.embed_tokens.weight.device.type != "cpu":
            why = "not on the CPU"
        elif (
            config.head_dim % 16
            or config.head_dim > _MAX_HEAD_DIM
            or config.num_attention_heads % config.num_key_value_heads
            or config.num_attention_heads // config.num_key_value_heads > _MAX_GROUP
        ):
            why = "an attention shape the kernel does not take"
        if why is not None:
            logger.debug("native decode step off: %s", why)
            return None
        assert kernels is not None
        hidden = config.hidden_size
        layers: list[_Layer] = []
        norm_dtypes = set()
        for layer in model.model.layers:
            attention, mlp = layer.self_attn, layer.mlp
            if not isinstance(attention, Attention) or not isinstance(mlp, DenseMLP):
                # an expert mixture, or blocks wrapped for tensor parallelism (their outputs all-reduced)
                logger.debug("native decode step off: a layer that is not plain attention and a dense MLP")
                return None
            if not isinstance(layer.input_layernorm, RMSNorm) or not isinstance(
                layer.post_attention_layernorm, RMSNorm
            ):
                logger.debug("native decode step off: norms of another kind")
                return None
            projections = [
                _projection(attention.qkv_proj, hidden),
                _projection(attention.o_proj, config.q_size),
                _projection(mlp.gate_up_proj, hidden),
                _projection(mlp.down_proj, mlp.intermediate_size),
            ]
            if any(found is None for found in projections):
                logger.debug("native decode step off: a projection without a native kernel layout")
                return None
            norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
            norm_dtypes |= {weight.dtype for weight in norms}
            layers.append(_Layer(norms[0].data_ptr(), norms[1].data_ptr(), *projections))
        if len(norm_dtypes) != 1 or not norm_dtypes <= set(_NORM_DTYPES):
            logger.debug("native decode step off: norm weights of mixed or unsupported dtypes")
            return None
        intermediate = {layer.mlp.intermediate_size for layer in model.model.layers}
        if len(intermediate) != 1:
            logger.debug("native decode step off: layers of different widths")
            return None
        shape = {
            "hidden": hidden,
            "heads": config.num_attention_heads,
            "kv_heads": config.num_key_value_heads,
            "head_dim": config.head_dim,
            "intermediate": intermediate.pop(),
        }
        norm_bf16 = norm_dtypes.pop() == torch.bfloat16
        return cls(kernels, layers, shape, config.rms_norm_eps, norm_bf16)

    def accepts(
        self,
        hidden: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        metadata: AttentionMetadata | list[AttentionMetadata],
    ) -> bool:
        """Whether this step is one the native call takes: a pure decode of a few sequences, no window."""
        return (
            isinstance(metadata, AttentionMetadata)
            and metadata.decode_context_lens is not None
            and metadata.num_decode_tokens == hidden.shape[0]
            and 0 < hidden.shape[0] <= skinny_matmul.MAX_ROWS
            and hidden.dtype == torch.bfloat16
            and metadata.kernel_plan is None
            and metadata.streaming is None
            and metadata.verify is None
            and not metadata.prefills
            and metadata.decode_block_tables is not None
            and self._caches_ready(kv_caches)
        )

    def run(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> bool:
        """Runs every layer over `hidden` [rows, hidden] in place and writes this step's keys and values;
        False when the native side declined before changing anything the fallback would not redo."""
        tables = metadata.decode_block_tables
        lens = metadata.decode_context_lens
        assert tables is not None and lens is not None
        batch = self._batch
        batch.rows = hidden.shape[0]
        batch.block_size = metadata.block_size
        batch.table_width = tables.shape[1]
        batch.block_tables = tables.data_ptr()
        batch.context_lens = lens.data_ptr()
        batch.slots = metadata.slot_mapping.data_ptr()
        batch.cos = cos.data_ptr()
        batch.sin = sin.data_ptr()
        done = self._kernels.library.sy_decode_layers(
            self._array, len(self._array), ctypes.byref(batch), hidden.data_ptr()
        )
        return bool(done)

    def _caches_ready(self, kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
        key = tuple(cache.data_ptr() for pair in kv_caches for cache in pair)
        if key == self._cache_key:
            return True
        if len(kv_caches) != len(self._array) or any(
            cache.dtype != torch.bfloat16
            or not cache.is_contiguous()
            or cache.dim() != 4
            or tuple(cache.shape[-2:]) != self._kv_shape
            for pair in kv_caches
            for cache in pair
        ):
            return False
        for entry, (k_cache, v_cache) in zip(self._array, kv_caches, strict=True):
            entry.k_cache = k_cache.data_ptr()
            entry.v_cache = v_cache.data_ptr()
        self._cache_key = key
        return True
