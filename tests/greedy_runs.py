"""Greedy generations that tests of quantized and pre-quantized models compare: Switchyard's engine on a folder,
and transformers' model step by step (tokens and the chosen tokens' logprobs)."""

from __future__ import annotations

from pathlib import Path

import torch

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams


def engine_greedy(
    folder: Path, quantization: str | None, prompts: list[list[int]], max_tokens: int = 16
) -> tuple[LLMEngine, list[list[int]]]:
    """A float32 engine on `folder` (quantized as asked) and its greedy tokens for each prompt, in order."""
    engine = LLMEngine(
        EngineConfig(
            model=str(folder),
            dtype="float32",
            quantization=quantization,
            skip_tokenizer=True,
            kv_cache_memory=4 << 20,
        )
    )
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for index, prompt in enumerate(prompts):
        engine.add_request(str(index), prompt, params)
    outputs: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                outputs[output.request_id] = output.outputs[0].token_ids
    return engine, [outputs[str(index)] for index in range(len(prompts))]


def transformers_greedy(
    model: torch.nn.Module, prompts: list[list[int]], max_tokens: int
) -> tuple[list[list[int]], list[list[float]]]:
    """A transformers causal LM's greedy tokens for each prompt and the log-probability of each, full forward
    passes (no cache), in float32."""
    tokens, logprobs = [], []
    with torch.no_grad():
        for prompt in prompts:
            ids, chosen = list(prompt), []
            for _ in range(max_tokens):
                last = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
                ids.append(int(last.argmax()))
                chosen.append(float(last.max()))
            tokens.append(ids[len(prompt) :])
            logprobs.append(chosen)
    return tokens, logprobs
