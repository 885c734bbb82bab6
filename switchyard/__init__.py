"""Switchyard: an LLM inference serving platform with an agent runtime on top."""

from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import CompletionOutput, RequestOutput
from switchyard.llm import LLM

__version__ = "0.1.0"
__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams", "__version__"]
