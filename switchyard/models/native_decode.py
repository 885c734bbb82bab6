"""A decode step's decoder layers as one native call (cpu_kernels/decode_layers.c), where the model allows it.

At batch 1 on two cores a Llama layer dispatches ~100 PyTorch operators around its five products, and the
operators with the Python between them cost about half a millisecond a layer: 12-15 ms of a 36 ms int8 step
(benchmarks/decode_breakdown.py). The C side runs the same products back to back with the glue (norms, rotary
embedding, KV write, paged attention, SwiGLU, residual adds) in between, rounding where PyTorch rounds.

It applies to Llama-family layers, dense or expert mixtures (Mixtral, Qwen2-MoE, Qwen3-MoE), with or without
q/k norms, without sliding windows, on the CPU with bf16 activations and a bf16 KV cache, whose projections are
all native-kernel layers (bf16 with `--max-num-seqs` <= 8, int8, w8a8 or int4; a mixture's stacked bf16 experts
and its routers always are), and to steps of up to `skinny_matmul.MAX_ROWS` rows: decodes, and short chunks
(speculative verification, or the last tokens of a prompt whose prefix is cached), each of whose rows attends
as a decode of its own length (a chunk's causal mask is exactly that). Everything else, and any step the native
call declines, takes the operator-by-operator path. The two paths agree to rounding; over several rows a q/k
norm differs by one bf16 rounding, since PyTorch's norm rounds twice there.
"""

from __future__ import annotations

import ctypes
import logging

import torch
import torch.nn.functional as F
from torch import nn

from switchyard.models.attention import AttentionMetadata
from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.native_library import NativeKernels, native_kernels
from switchyard.models.cpu_kernels.skinny_matmul import NativeProjection
from switchyard.models.moe import SparseMoeBlock

logger = logging.getLogger(__name__)

_KINDS = {"bf16": 0, "int8": 1, "int4": 2}
_MAX_HEAD_DIM = 128
_MAX_GROUP = 16
_MAX_TOP_K = 16
_BF16_K_MULTIPLE = 32
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


class _Mixture(ctypes.Structure):
    _fields_ = [
        ("experts", ctypes.c_int64),
        ("top_k", ctypes.c_int64),
        ("normalize", ctypes.c_int64),
        ("inner", ctypes.c_int64),
        ("router", _Projection),
        ("gate_up", ctypes.c_void_p),
        ("down", ctypes.c_void_p),
        ("shared_inner", ctypes.c_int64),
        ("shared_gate_up", _Projection),
        ("shared_down", _Projection),
        ("shared_gate", _Projection),
        ("routed_tokens", ctypes.c_void_p),
    ]


class _Layer(ctypes.Structure):
    _fields_ = [
        ("input_norm", ctypes.c_void_p),
        ("post_norm", ctypes.c_void_p),
        ("q_norm", ctypes.c_void_p),
        ("k_norm", ctypes.c_void_p),
        ("qkv", _Projection),
        ("o", _Projection),
        ("gate_up", _Projection),
        ("down", _Projection),
        ("inner", ctypes.c_int64),
        ("moe", ctypes.c_void_p),
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


def _stacked_experts(stack: torch.Tensor) -> ctypes.Array[_Projection] | None:
    """Each expert's slice of a stacked bf16 [experts, out, in] weight as a bf16 projection (the plain layout
    the native bf16 kernel reads), or None where the kernel cannot take it."""
    experts, out_features, in_features = stack.shape
    if stack.dtype != torch.bfloat16 or not stack.is_contiguous() or in_features % _BF16_K_MULTIPLE:
        return None
    stride = out_features * in_features * stack.element_size()
    base = stack.data_ptr()
    return (_Projection * experts)(
        *(
            _Projection(_KINDS["bf16"], out_features, in_features, 0, base + e * stride)
            for e in range(experts)
        )
    )


def _quantized_experts(layers: nn.ModuleList, in_features: int) -> ctypes.Array[_Projection] | None:
    found = [_projection(layer, in_features) for layer in layers]
    if any(projection is None for projection in found):
        return None
    return (_Projection * len(found))(*found)


def _mixture(block: SparseMoeBlock, hidden: int, keep: list[object]) -> _Mixture | None:
    """The block as the C side's mixture, or None where a part has no native layout. Arrays the struct points
    into are appended to `keep`, which must outlive it."""
    moe = block.moe
    router = _projection(block.gate, hidden)
    if router is None or moe.top_k > _MAX_TOP_K or moe.top_k > moe.num_experts:
        return None
    quantized = block.quantized_experts
    if quantized is not None:
        gate_up = _quantized_experts(quantized.gate_up, hidden)  # type: ignore[arg-type]
        down = _quantized_experts(quantized.down, moe.expert_intermediate_size)  # type: ignore[arg-type]
    elif block.experts_gate_up is not None and block.experts_down is not None:
        gate_up, down = _stacked_experts(block.experts_gate_up), _stacked_experts(block.experts_down)
    else:
        return None
    if gate_up is None or down is None:
        return None
    mixture = _Mixture(
        experts=moe.num_experts,
        top_k=moe.top_k,
        normalize=int(moe.normalize_topk),
        inner=moe.expert_intermediate_size,
        router=router,
        gate_up=ctypes.addressof(gate_up),
        down=ctypes.addressof(down),
        routed_tokens=block.routed_tokens.data_ptr(),
    )
    if block.shared_expert is not None and block.shared_expert_gate is not None:
        shared = block.shared_expert
        parts = (
            _projection(shared.gate_up_proj, hidden),
            _projection(shared.down_proj, shared.intermediate_size),
            _projection(block.shared_expert_gate, hidden),
        )
        if any(part is None for part in parts):
            return None
        mixture.shared_inner = shared.intermediate_size
        mixture.shared_gate_up, mixture.shared_down, mixture.shared_gate = parts
    keep += [gate_up, down, mixture]
    return mixture


class NativeDecoder:
    """The decoder layers of one model as `sy_decode_layers` calls. Holds raw pointers into the modules'
    weights (which the model keeps alive and never moves after load) and into the KV caches, re-read whenever
    the caches change."""

    def __init__(
        self,
        kernels: NativeKernels,
        layers: list[_Layer],
        shape: dict[str, int],
        eps: float,
        norm_bf16: bool,
        keep: list[object],
    ) -> None:
        """`layers`: each decoder layer's norms and projections (KV-cache pointers are filled per step);
        `keep`: the arrays and structs the layers point into (a mixture's experts)."""
        self._kernels = kernels
        self._keep = keep
        self._array = (_Layer * len(layers))(*layers)
        self._kv_shape = (shape["kv_heads"], shape["head_dim"])
        self._planned: tuple[AttentionMetadata, tuple[torch.Tensor, torch.Tensor]] | None = None
        """The step `accepts` took last, with each row's block table and context length, for `run`."""
        self._cache_key: tuple[int, ...] = ()
        self._batch = _Batch()
        batch = self._batch
        batch.hidden = shape["hidden"]
        batch.heads = shape["heads"]
        batch.kv_heads = shape["kv_heads"]
        batch.head_dim = shape["head_dim"]
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
        elif config.sliding_window or config.layer_windows:
            why = "a sliding window"
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
        keep: list[object] = []
        norm_dtypes = set()
        for layer in model.model.layers:
            attention, mlp = layer.self_attn, layer.mlp
            if not isinstance(attention, Attention) or not isinstance(mlp, DenseMLP | SparseMoeBlock):
                # blocks wrapped for tensor parallelism (their outputs all-reduced)
                logger.debug("native decode step off: a layer that is not plain attention and feed-forward")
                return None
            norm_modules = [layer.input_layernorm, layer.post_attention_layernorm]
            if attention.q_norm is not None and attention.k_norm is not None:
                norm_modules += [attention.q_norm, attention.k_norm]
            if not all(isinstance(norm, RMSNorm) for norm in norm_modules):
                logger.debug("native decode step off: norms of another kind")
                return None
            norms = [norm.weight for norm in norm_modules]
            norm_dtypes |= {weight.dtype for weight in norms}
            entry = _Layer(
                input_norm=norms[0].data_ptr(),
                post_norm=norms[1].data_ptr(),
                q_norm=norms[2].data_ptr() if len(norms) > 2 else None,
                k_norm=norms[3].data_ptr() if len(norms) > 2 else None,
            )
            attention_parts = (
                _projection(attention.qkv_proj, hidden),
                _projection(attention.o_proj, config.q_size),
            )
            if isinstance(mlp, DenseMLP):
                feed_forward = (
                    _projection(mlp.gate_up_proj, hidden),
                    _projection(mlp.down_proj, mlp.intermediate_size),
                )
                entry.inner = mlp.intermediate_size
            else:
                mixture = _mixture(mlp, hidden, keep)
                feed_forward = (_Projection(), _Projection()) if mixture is not None else (None, None)
                entry.moe = ctypes.addressof(mixture) if mixture is not None else None
            parts = (*attention_parts, *feed_forward)
            if any(found is None for found in parts):
                logger.debug("native decode step off: a projection without a native kernel layout")
                return None
            entry.qkv, entry.o, entry.gate_up, entry.down = parts
            layers.append(entry)
        if len(norm_dtypes) != 1 or not norm_dtypes <= set(_NORM_DTYPES):
            logger.debug("native decode step off: norm weights of mixed or unsupported dtypes")
            return None
        shape = {
            "hidden": hidden,
            "heads": config.num_attention_heads,
            "kv_heads": config.num_key_value_heads,
            "head_dim": config.head_dim,
        }
        norm_bf16 = norm_dtypes.pop() == torch.bfloat16
        return cls(kernels, layers, shape, config.rms_norm_eps, norm_bf16, keep)

    def accepts(
        self,
        hidden: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        metadata: AttentionMetadata | list[AttentionMetadata],
    ) -> bool:
        """Whether this step is one the native call takes: a few rows, each a decode or a row of a short chunk
        (speculative verification, or the end of a prompt), attended as a decode of its own length; no window."""
        if not (
            isinstance(metadata, AttentionMetadata)
            and 0 < hidden.shape[0] <= skinny_matmul.MAX_ROWS
            and hidden.dtype == torch.bfloat16
            and metadata.kernel_plan is None
            and metadata.streaming is None
            and self._caches_ready(kv_caches)
        ):
            return False
        rows = self._rows(metadata, hidden.shape[0])
        self._planned = (metadata, rows) if rows is not None else None
        return rows is not None

    def run(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> bool:
        """Runs every layer over `hidden` [rows, hidden] in place and writes this step's keys and values;
        False when the native side declined before changing anything the fallback would not redo. `accepts`
        must have taken this step's metadata first."""
        planned = self._planned
        assert planned is not None and planned[0] is metadata, "run() without accepts() for this step"
        tables, lens = planned[1]
        self._planned = None
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

    @staticmethod
    def _rows(metadata: AttentionMetadata, rows: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Each row's block table [rows, width] and context length [rows] (int64, contiguous, CPU): the decodes,
        the batched verification chunks' rows, then each chunk's rows (the runner's order); None where the
        metadata does not describe every row so (a window, a mask, rows out of order)."""
        decodes = metadata.num_decode_tokens
        tables: list[torch.Tensor] = []
        lens: list[torch.Tensor] = []
        if decodes:
            if metadata.decode_context_lens is None or metadata.decode_block_tables is None:
                return None
            tables.append(metadata.decode_block_tables)
            lens.append(metadata.decode_context_lens)
        covered = decodes
        verify = metadata.verify
        if verify is not None:
            if verify.row_sequences is None or verify.row_context_lens is None or verify.start != covered:
                return None
            tables.append(verify.block_tables.index_select(0, verify.row_sequences))
            lens.append(verify.row_context_lens)
            covered = verify.end
        if metadata.prefills and metadata.sliding_window is not None:
            return None
        for span in metadata.prefills:  # a chunk of n rows: row j attends to context_len - n + j + 1 keys
            if span.start != covered or span.block_table.device.type != "cpu":
                return None
            count = span.end - span.start
            tables.append(span.block_table[None, :].expand(count, -1))
            lens.append(torch.arange(span.context_len - count + 1, span.context_len + 1))
            covered = span.end
        if covered != rows:
            return None
        if len(tables) == 1:
            return tables[0].contiguous(), lens[0].contiguous()
        width = max(table.shape[1] for table in tables)
        joined = torch.cat([F.pad(table, (0, width - table.shape[1])) for table in tables])
        return joined, torch.cat(lens)

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
