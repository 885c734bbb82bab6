"""The engine on CUDA: the Triton kernel with CUDA graphs against the eager SDPA path, structured outputs and
speculative decoding. gpu-marked: skipped without CUDA (`benchmarks/gpu_check.sh` runs them)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest
import torch

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.llm import LLM

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _engine(folder: Path, **overrides: object) -> LLMEngine:
    settings: dict[str, object] = dict(
        model=str(folder), dtype="float32", device="cuda", skip_tokenizer=True, kv_cache_memory=64 << 20
    )
    settings.update(overrides)
    return LLMEngine(EngineConfig(**settings))  # type: ignore[arg-type]


def _greedy(engine: LLMEngine, prompts: list[list[int]], max_tokens: int = 24) -> list[list[int]]:
    for index, prompt in enumerate(prompts):
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        engine.add_request(str(index), prompt, params)
    done: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                assert output.error is None, output.error
                done[output.request_id] = list(output.outputs[0].token_ids)
    return [done[str(i)] for i in range(len(prompts))]


def test_kernel_and_graphs_match_the_eager_sdpa_path(tiny_model_dir: Path) -> None:
    """auto picks the kernel and captures graphs on CUDA; 7 prompts (padded to a graph of 8, then fewer as
    they finish at different lengths), a shared prefix, greedy: the same tokens as eager SDPA."""
    rng = random.Random(0)
    shared = rng.choices(range(5, 300), k=40)
    prompts = [shared + rng.choices(range(5, 300), k=n) for n in (1, 5, 17, 30)]
    prompts += [rng.choices(range(5, 300), k=n) for n in (3, 64, 9)]
    fast = _engine(tiny_model_dir)
    assert fast.runner.kernel_group is not None and fast.runner.graphs is not None
    got = _greedy(fast, prompts)
    assert fast.runner.graphs.replays > 0
    reference = _greedy(_engine(tiny_model_dir, attention_backend="sdpa", enforce_eager=True), prompts)
    assert got == reference


def test_bf16_kernel_stays_close_to_sdpa(tiny_model_dir: Path) -> None:
    """bf16 on both paths: teacher-forced prompt logprobs within bf16 rounding of each other."""
    prompt = random.Random(1).choices(range(5, 300), k=200)

    def logprobs(**overrides: object) -> list[float]:
        engine = _engine(tiny_model_dir, dtype="bfloat16", max_num_batched_tokens=64, **overrides)
        engine.add_request("r", prompt, SamplingParams(max_tokens=1, prompt_logprobs=0))
        values: list[float] = []
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished and output.prompt_logprobs is not None:
                    values = [e.logprob for e in output.prompt_logprobs[1:] if e is not None]
        return values

    kernel, sdpa = logprobs(), logprobs(attention_backend="sdpa", enforce_eager=True)
    assert len(kernel) == len(sdpa) == len(prompt) - 1
    assert max(abs(a - b) for a, b in zip(kernel, sdpa, strict=True)) < 0.1


def test_structured_outputs_on_cuda(tiny_model_dir: Path) -> None:
    llm = LLM(model=str(tiny_model_dir), dtype="float32", device="cuda", kv_cache_memory=64 << 20)
    spec = StructuredOutputsParams(json=PERSON)
    params = [
        SamplingParams(temperature=1.0, max_tokens=120, seed=i, structured_outputs=spec) for i in range(6)
    ]
    for output in llm.generate(["hello", "x", "{", "a b", "1 2 3", "fox"], params):
        value = json.loads(output.outputs[0].text)
        jsonschema.validate(value, PERSON)


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_speculative_greedy_equals_plain_greedy_on_cuda(tiny_model_dir: Path, method: str) -> None:
    """Speculation (verification chunks on the kernel, plain decodes on graphs) leaves greedy output as is."""
    rng = random.Random(2)
    motif = rng.choices(range(5, 300), k=6)
    prompts = [motif * 4, rng.choices(range(5, 300), k=11)]
    plain = _greedy(_engine(tiny_model_dir), prompts)
    speculative = _engine(
        tiny_model_dir,
        speculative_method=method,
        speculative_model=str(tiny_model_dir) if method == "draft" else None,
        num_speculative_tokens=3,
    )
    assert _greedy(speculative, prompts) == plain
