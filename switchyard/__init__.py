"""Switchyard: an LLM inference serving platform with an agent runtime on top.

The top-level names load lazily (vLLM's module-attribute table): `import switchyard.agents`, `.bench` or
`.plan` never pays for torch and the engine; `from switchyard import LLM` does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from switchyard.engine.sampling_params import SamplingParams
    from switchyard.engine.sequence import CompletionOutput, RequestOutput
    from switchyard.llm import LLM

__version__ = "0.1.0"

MODULE_ATTRS = {
    "LLM": "switchyard.llm",
    "SamplingParams": "switchyard.engine.sampling_params",
    "CompletionOutput": "switchyard.engine.sequence",
    "RequestOutput": "switchyard.engine.sequence",
}
"""Each lazily exported name and the module that defines it."""

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams", "__version__"]


def __getattr__(name: str) -> Any:
    module = MODULE_ATTRS.get(name)
    if module is None:
        raise AttributeError(f"module 'switchyard' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
