"""Weight quantization of the decoder's projections: int8 weight-only, w8a8 (int8 weights and per-token int8
activations), int4 weight-only (group-wise); checkpoints in the compressed-tensors layout `switchyard quantize`
writes, and pre-quantized GPTQ, AWQ and compressed-tensors int4/fp8 checkpoints. Embeddings, the LM head and
norms stay in the model's dtype, as `switchyard plan --quantization` counts."""

from switchyard.models.quantization.methods import QUANTIZATION_METHODS, QuantizationSpec

__all__ = ["QUANTIZATION_METHODS", "QuantizationSpec"]
