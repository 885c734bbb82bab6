"""Llama-family model runtime: configs, weights, the forward pass over a paged KV cache."""

from switchyard.models.config import ModelArchConfig
from switchyard.models.llama import LlamaForCausalLM
from switchyard.models.loader import load_model, parse_dtype

__all__ = ["LlamaForCausalLM", "ModelArchConfig", "load_model", "parse_dtype"]
