"""Llama-family model runtime: configs, weights, the forward pass over a paged KV cache; `registry` maps
bundled model names to folders. Names load lazily, so `models.registry` and `models.config` stay torch-free."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from switchyard.models.config import ModelArchConfig
    from switchyard.models.llama import LlamaForCausalLM
    from switchyard.models.loader import load_model, parse_dtype

MODULE_ATTRS = {
    "ModelArchConfig": "switchyard.models.config",
    "LlamaForCausalLM": "switchyard.models.llama",
    "load_model": "switchyard.models.loader",
    "parse_dtype": "switchyard.models.loader",
}

__all__ = ["LlamaForCausalLM", "ModelArchConfig", "load_model", "parse_dtype"]


def __getattr__(name: str) -> Any:
    module = MODULE_ATTRS.get(name)
    if module is None:
        raise AttributeError(f"module 'switchyard.models' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
