"""The architecture description of a Llama-family model, parsed once from a Hugging Face `config.json`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from switchyard.errors import ModelLoadError, UnsupportedModelError

SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "mistral",
}
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding parameters; `rope_type` is one of SUPPORTED_ROPE_TYPES."""

    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None


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
                qk_norm=model_type == "qwen3",
                rope=_rope_config(raw, source),
                sliding_window=_sliding_window(raw, model_type, source),
                bos_token_id=raw.get("bos_token_id"),
                eos_token_ids=_as_ids(raw.get("eos_token_id")),
                torch_dtype=raw.get("dtype") or raw.get("torch_dtype"),
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
    # Qwen2 always has q/k/v biases (its config has no flag); the others follow `attention_bias`.
    if model_type == "qwen2":
        return True
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
    original = params.get("original_max_position_embeddings")
    return RopeConfig(
        theta=theta,
        rope_type=rope_type,
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(original) if original is not None else None,
    )


def _sliding_window(raw: dict[str, Any], model_type: str, source: str | None) -> int | None:
    window = raw.get("sliding_window")
    if model_type in ("qwen2", "qwen3"):
        # Qwen configs carry a window that only applies when use_sliding_window is set, and then only to
        # some layers (max_window_layers); that per-layer mix is not implemented.
        if raw.get("use_sliding_window"):
            raise UnsupportedModelError(
                "use_sliding_window=true (per-layer sliding window) is not supported", source
            )
        return None
    if model_type == "mistral" and window is not None:
        return int(window)
    return None
