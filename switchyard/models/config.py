"""The architecture description of a Llama-family model, parsed once from a Hugging Face `config.json`."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from switchyard.errors import ModelLoadError, UnsupportedModelError

SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding parameters; `rope_type` is one of SUPPORTED_ROPE_TYPES."""

    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    """YaRN: rotations per original context above which a dimension is left unscaled (extrapolated)."""
    beta_slow: float = 1.0
    """YaRN: rotations per original context below which a dimension is fully interpolated."""
    truncate: bool = True
    """YaRN: round the correction range outwards to whole dimensions, as the reference implementation does."""
    attention_factor: float = 1.0
    """Scale on cos and sin (YaRN's mscale, which sharpens attention at long range); 1.0 for the other types."""


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts feed-forward of Mixtral, Qwen2-MoE and Qwen3-MoE, in one shape.

    Every sparse layer routes each token to `top_k` of `num_experts` SwiGLU experts by a softmax router; the
    architectures differ only in whether the top-k weights are renormalised, in a shared expert (Qwen2-MoE, with
    its own sigmoid gate) and in how the checkpoint names its tensors.
    """

    num_experts: int
    top_k: int
    expert_intermediate_size: int
    normalize_topk: bool
    """Divide the chosen experts' probabilities by their sum (Mixtral always; Qwen as `norm_topk_prob` says)."""
    sparse_layers: tuple[int, ...]
    """Indices of the layers whose MLP is the expert mixture; the others keep a dense MLP."""
    shared_expert_intermediate_size: int = 0
    """Width of the always-on shared expert (Qwen2-MoE); 0 when the architecture has none."""
    checkpoint_style: str = "qwen"
    """"mixtral": `block_sparse_moe.experts.E.w1/w3/w2`; "qwen": `mlp.experts.E.gate_proj/up_proj/down_proj`."""

    @property
    def has_shared_expert(self) -> bool:
        return self.shared_expert_intermediate_size > 0


@dataclass(frozen=True)
class ModelArchConfig:
    """Everything the forward pass needs to know about the network's shape."""

    architecture: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    qk_norm: bool
    rope: RopeConfig
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    torch_dtype: str | None = None
    moe: MoEConfig | None = None
    layer_windows: tuple[int | None, ...] = ()
    """Per-layer sliding window (None: full attention), when layers differ (Qwen2 `max_window_layers`); empty
    when every layer uses `sliding_window`."""
    attention_sinks: int = 0
    """StreamingLLM mode (`with_long_context`): every query also sees the first this many tokens, at cache
    positions (`streaming_attention`); 0 for a plain model."""

    def window_of(self, layer: int) -> int | None:
        """The sliding window of one layer, or None where it attends to the whole context."""
        return self.layer_windows[layer] if self.layer_windows else self.sliding_window

    @property
    def release_window(self) -> int | None:
        """The window past which KV blocks may be released: every layer attends within it. None when some
        layer attends to the whole context (its keys are all needed, and a block holds every layer's)."""
        if self.layer_windows and any(w is None for w in self.layer_windows):
            return None
        return max(self.layer_windows) if self.layer_windows else self.sliding_window  # type: ignore[type-var]

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str | None = None) -> ModelArchConfig:
        """Validate a config dict; unsupported features raise UnsupportedModelError naming the field."""
        if not isinstance(raw, dict):
            raise ModelLoadError(f"config holds a JSON {type(raw).__name__}, not an object", source)
        archs = raw.get("architectures") or []
        architecture = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if architecture is None:
            model_type = raw.get("model_type")
            by_type = {v: k for k, v in SUPPORTED_ARCHITECTURES.items()}
            if model_type in by_type and not archs:
                architecture = by_type[model_type]
            else:
                raise UnsupportedModelError(
                    f"unsupported architecture {archs or model_type!r}; supported: "
                    f"{', '.join(SUPPORTED_ARCHITECTURES)}",
                    source,
                )
        model_type = SUPPORTED_ARCHITECTURES[architecture]
        hidden_act = raw.get("hidden_act", "silu")
        if hidden_act != "silu":
            raise UnsupportedModelError(f"hidden_act {hidden_act!r} is not supported (only 'silu')", source)
        try:
            hidden_size = int(raw["hidden_size"])
            num_heads = int(raw["num_attention_heads"])
            windows = _sliding_windows(raw, model_type, source)
            config = cls(
                architecture=architecture,
                model_type=model_type,
                vocab_size=int(raw["vocab_size"]),
                hidden_size=hidden_size,
                intermediate_size=int(raw["intermediate_size"]),
                num_hidden_layers=int(raw["num_hidden_layers"]),
                num_attention_heads=num_heads,
                num_key_value_heads=int(raw.get("num_key_value_heads") or num_heads),
                head_dim=int(raw.get("head_dim") or hidden_size // num_heads),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
                # transformers defaults to untied for all four architectures when the key is absent.
                tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                attention_bias=_attention_bias(raw, model_type),
                qk_norm=model_type in ("qwen3", "qwen3_moe"),
                rope=_rope_config(raw, source),
                sliding_window=windows[0],
                layer_windows=windows[1],
                bos_token_id=raw.get("bos_token_id"),
                eos_token_ids=_as_ids(raw.get("eos_token_id")),
                torch_dtype=raw.get("dtype") or raw.get("torch_dtype"),
                moe=_moe_config(raw, model_type, source),
            )
        except KeyError as exc:
            raise ModelLoadError(f"config is missing required field {exc.args[0]!r}", source) from None
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"config has a malformed field: {exc}", source) from None
        sizes = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        for name in (*sizes, "num_key_value_heads", "head_dim", "max_position_embeddings"):
            if getattr(config, name) < 1:
                raise ModelLoadError(
                    f"config field {name!r} must be positive, not {getattr(config, name)}", source
                )
        if config.num_attention_heads % config.num_key_value_heads:
            raise ModelLoadError(
                f"num_attention_heads ({num_heads}) is not a multiple of num_key_value_heads "
                f"({config.num_key_value_heads})",
                source,
            )
        if config.moe is not None:
            _check_moe(config.moe, source)
        return config

    @classmethod
    def from_folder(cls, folder: str | Path) -> ModelArchConfig:
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise ModelLoadError("config.json not found", str(path.parent))
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelLoadError(f"cannot parse config.json: {exc}", str(path)) from None
        return cls.from_dict(raw, str(path))


def _as_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


def _attention_bias(raw: dict[str, Any], model_type: str) -> bool:
    # Qwen2 always has q/k/v biases (its config has no flag); Qwen2-MoE says so in `qkv_bias` (default true);
    # the others follow `attention_bias`.
    if model_type == "qwen2":
        return True
    if model_type == "qwen2_moe":
        return bool(raw.get("qkv_bias", True))
    return bool(raw.get("attention_bias", False))


def _rope_config(raw: dict[str, Any], source: str | None) -> RopeConfig:
    # transformers >= 5 writes `rope_parameters` (holding rope_theta); older configs write `rope_theta` and
    # `rope_scaling`. Both are accepted.
    params = dict(raw.get("rope_parameters") or {})
    scaling = raw.get("rope_scaling") or {}
    if not params and scaling:
        params = dict(scaling)
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type") or params.get("type") or "default"
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedModelError(
            f"rope type {rope_type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}", source
        )
    # Like transformers: a top-level original_max_position_embeddings (Phi-3 style) wins over the rope dict's.
    original = raw.get("original_max_position_embeddings") or params.get("original_max_position_embeddings")
    max_positions = int(raw.get("max_position_embeddings", 2048))
    factor = params.get("factor")
    if factor is None:
        # YaRN without a factor stretches the original context to max_position_embeddings.
        factor = max_positions / int(original) if rope_type == "yarn" and original else 1.0
    factor = float(factor)
    if rope_type in ("yarn", "dynamic") and factor < 1.0:
        raise UnsupportedModelError(f"{rope_type} rope factor must be >= 1, not {factor}", source)
    return RopeConfig(
        theta=theta,
        rope_type=rope_type,
        factor=factor,
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(original) if original is not None else None,
        beta_fast=float(params.get("beta_fast") or 32.0),
        beta_slow=float(params.get("beta_slow") or 1.0),
        truncate=bool(params.get("truncate", True)),
        attention_factor=_yarn_attention_factor(params, factor) if rope_type == "yarn" else 1.0,
    )


def _yarn_attention_factor(params: dict[str, Any], factor: float) -> float:
    """YaRN's mscale (Eq. 21 of the paper, 0.1 ln(s) + 1), or the ratio DeepSeek-style configs ask for."""
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])

    def mscale(scale: float, weight: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * weight * math.log(scale) + 1.0

    weight, weight_all = params.get("mscale"), params.get("mscale_all_dim")
    if weight and weight_all:
        return mscale(factor, float(weight)) / mscale(factor, float(weight_all))
    return mscale(factor)


def _sliding_windows(
    raw: dict[str, Any], model_type: str, source: str | None
) -> tuple[int | None, tuple[int | None, ...]]:
    """(window, per-layer windows): the per-layer tuple is empty when every layer uses `window` (None: none).

    Mistral and Mixtral window every layer. Qwen configs carry a window that applies only when
    `use_sliding_window` is set: Qwen3-MoE then windows every layer, Qwen2, Qwen3 and Qwen2-MoE only the layers
    `layer_types` names "sliding_attention" (derived from `max_window_layers` as transformers does when a
    config predates `layer_types`)."""
    window = raw.get("sliding_window")
    if model_type in ("mistral", "mixtral"):
        return (int(window) if window is not None else None), ()
    if model_type not in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") or not raw.get("use_sliding_window"):
        return None, ()
    if not window or int(window) < 1:
        raise ModelLoadError(f"use_sliding_window is set but sliding_window is {window!r}", source)
    window = int(window)
    if model_type == "qwen3_moe":
        return window, ()
    layers = int(raw["num_hidden_layers"])
    types = raw.get("layer_types") or _derived_layer_types(raw, model_type, layers)
    if len(types) != layers or set(types) - {"full_attention", "sliding_attention"}:
        raise UnsupportedModelError(
            f"layer_types must name full_attention or sliding_attention for each of {layers} layers", source
        )
    per_layer = tuple(window if kind == "sliding_attention" else None for kind in types)
    if all(w == window for w in per_layer):
        return window, ()
    if not any(per_layer):
        return None, ()
    return window, per_layer


def _derived_layer_types(raw: dict[str, Any], model_type: str, layers: int) -> list[str]:
    """transformers' rule for configs without `layer_types` (it differs between Qwen2 and Qwen2-MoE)."""
    bound = int(raw.get("max_window_layers", 28))
    if model_type == "qwen2_moe":
        sliding = [bool((i + 1) % 2) and i < bound for i in range(layers)]
    else:
        sliding = [i >= bound for i in range(layers)]
    return ["sliding_attention" if s else "full_attention" for s in sliding]


def _moe_config(raw: dict[str, Any], model_type: str, source: str | None) -> MoEConfig | None:
    """The expert mixture the config describes, with each architecture's defaults as transformers has them."""
    layers = int(raw["num_hidden_layers"])
    if model_type == "mixtral":
        return MoEConfig(
            num_experts=int(raw.get("num_local_experts", 8)),
            top_k=int(raw.get("num_experts_per_tok", 2)),
            expert_intermediate_size=int(raw["intermediate_size"]),
            normalize_topk=True,
            sparse_layers=tuple(range(layers)),
            checkpoint_style="mixtral",
        )
    if model_type not in ("qwen2_moe", "qwen3_moe"):
        return None
    # transformers 5 saves Qwen3-MoE's `num_experts` under its alias `num_local_experts`.
    num_experts = int(
        raw.get("num_experts") or raw.get("num_local_experts") or (60 if model_type == "qwen2_moe" else 128)
    )
    step = int(raw.get("decoder_sparse_step", 1))
    if step < 1:
        raise ModelLoadError(f"decoder_sparse_step must be positive, not {step}", source)
    dense_only = {int(i) for i in raw.get("mlp_only_layers") or ()}
    sparse = tuple(
        i for i in range(layers) if i not in dense_only and num_experts > 0 and (i + 1) % step == 0
    )
    shared = int(raw.get("shared_expert_intermediate_size", 5632)) if model_type == "qwen2_moe" else 0
    return MoEConfig(
        num_experts=num_experts,
        top_k=int(raw.get("num_experts_per_tok", 4 if model_type == "qwen2_moe" else 8)),
        expert_intermediate_size=int(
            raw.get("moe_intermediate_size", 1408 if model_type == "qwen2_moe" else 768)
        ),
        normalize_topk=bool(raw.get("norm_topk_prob", False)),
        sparse_layers=sparse,
        shared_expert_intermediate_size=shared,
        checkpoint_style="qwen",
    )


def _check_moe(moe: MoEConfig, source: str | None) -> None:
    if not moe.sparse_layers:
        return
    if moe.num_experts < 1 or moe.expert_intermediate_size < 1:
        raise ModelLoadError("an expert mixture needs num_experts and its intermediate size positive", source)
    if not 1 <= moe.top_k <= moe.num_experts:
        raise ModelLoadError(
            f"num_experts_per_tok ({moe.top_k}) must be between 1 and num_experts ({moe.num_experts})", source
        )
    if moe.shared_expert_intermediate_size < 0:
        raise ModelLoadError("shared_expert_intermediate_size must not be negative", source)


def with_long_context(
    config: ModelArchConfig, sliding_window: int | None, attention_sinks: int
) -> ModelArchConfig:
    """The model served with a window the checkpoint does not have (`--sliding-window`), optionally keeping
    `attention_sinks` first tokens (`--attention-sinks`, StreamingLLM); raises ValueError naming the flags
    where they cannot apply."""
    if sliding_window is None:
        if attention_sinks:
            raise ValueError(
                "--attention-sinks needs --sliding-window (the recent tokens kept beside the sinks)"
            )
        return config
    if config.sliding_window is not None or config.layer_windows:
        raise ValueError(
            f"{config.architecture} has its own sliding window ({config.sliding_window}); --sliding-window and "
            "--attention-sinks are for models without one"
        )
    if sliding_window < 1 or attention_sinks < 0:
        raise ValueError("--sliding-window must be >= 1 and --attention-sinks >= 0")
    if sliding_window + attention_sinks > config.max_position_embeddings:
        raise ValueError(
            f"--sliding-window {sliding_window} plus --attention-sinks {attention_sinks} exceed the model's "
            f"max_position_embeddings ({config.max_position_embeddings}): distances it was never trained on"
        )
    return dataclasses.replace(config, sliding_window=sliding_window, attention_sinks=attention_sinks)
