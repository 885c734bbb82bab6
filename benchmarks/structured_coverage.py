"""Structured-output coverage on the JSONSchemaBench dev slice (../shared/corpora/jsonschemabench-dev).

For each grammar backend: how many schemas compile (the rest are rejected with a message); how many of the
corpus's valid instances the matcher accepts and of its invalid instances it rejects, fed as tokens; and, for
constrained generation from a random-initialised model (greedy and temperature 1), how many outputs finish
within the token limit and how many of those parse with `json.loads` (strict) and validate with `jsonschema`.

Usage: python benchmarks/structured_coverage.py [--backends xgrammar,llguidance] [--max-tokens 160]
       [--corpus DIR] [--json results/structured_coverage.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "jsonschemabench-dev"


@dataclass
class Coverage:
    backend: str
    schemas: int = 0
    compiled: int = 0
    compile_seconds: float = 0.0
    valid_instances: int = 0
    valid_accepted: int = 0
    invalid_instances: int = 0
    invalid_rejected: int = 0
    generated: dict[str, dict[str, int]] = field(default_factory=dict)
    """temperature -> {"outputs", "finished", "valid"}."""
    invalid_outputs: list[dict[str, Any]] = field(default_factory=list)
    rejections: dict[str, int] = field(default_factory=dict)

    def rates(self) -> dict[str, float]:
        out = {
            "compiled": self.compiled / max(1, self.schemas),
            "valid_accepted": self.valid_accepted / max(1, self.valid_instances),
            "invalid_rejected": self.invalid_rejected / max(1, self.invalid_instances),
        }
        for temperature, counts in self.generated.items():
            out[f"finished@T={temperature}"] = counts["finished"] / max(1, counts["outputs"])
            out[f"valid_of_finished@T={temperature}"] = counts["valid"] / max(1, counts["finished"])
        return out


def load_corpus(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) | {"file": path.name} for path in sorted(folder.glob("*.json"))]


def measure(
    llm: Any, cases: list[dict[str, Any]], temperatures: tuple[float, ...], max_tokens: int
) -> Coverage:
    """Coverage of the backend inside `llm`'s engine (an LLM from switchyard.llm)."""
    from switchyard.engine.sampling_params import SamplingParams
    from switchyard.engine.structured.params import StructuredOutputsParams
    from switchyard.errors import InvalidRequestError

    engine = llm.engine
    manager = engine.structured_outputs
    coverage = Coverage(backend=manager.backend.name, schemas=len(cases))
    compiled: list[tuple[dict[str, Any], StructuredOutputsParams]] = []
    start = time.perf_counter()
    for case in cases:
        spec = StructuredOutputsParams(json=case["schema"])
        try:
            grammar = manager.compile(spec)
        except InvalidRequestError as error:
            reason = str(error).split(":")[0]
            coverage.rejections[reason] = coverage.rejections.get(reason, 0) + 1
            continue
        coverage.compiled += 1
        compiled.append((case, spec))
        for test in case["tests"]:
            ids = engine.tokenizer.encode(
                json.dumps(test["data"], ensure_ascii=False), add_special_tokens=False
            )
            matcher = manager.new_matcher(grammar)
            accepted = all(matcher.accept_token(t) for t in ids) and matcher.accept_token(
                engine.eos_token_ids[0]
            )
            if test["valid"]:
                coverage.valid_instances += 1
                coverage.valid_accepted += accepted
            else:
                coverage.invalid_instances += 1
                coverage.invalid_rejected += not accepted
    coverage.compile_seconds = time.perf_counter() - start
    for temperature in temperatures:
        params = [
            SamplingParams(temperature=temperature, seed=i, max_tokens=max_tokens, structured_outputs=spec)
            for i, (_, spec) in enumerate(compiled)
        ]
        outputs = llm.generate(["{"] * len(compiled), params)
        counts = {"outputs": len(outputs), "finished": 0, "valid": 0}
        for (case, _), output in zip(compiled, outputs, strict=True):
            completion = output.outputs[0]
            if completion.finish_reason != "stop":
                continue
            counts["finished"] += 1
            try:
                jsonschema.validate(json.loads(completion.text), case["schema"])
                counts["valid"] += 1
            except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError) as error:
                coverage.invalid_outputs.append(
                    {
                        "file": case["file"],
                        "temperature": temperature,
                        "text": completion.text[:300],
                        "error": str(error)[:300],
                    }
                )
        coverage.generated[str(temperature)] = counts
    return coverage


def build_model(folder: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from model_factory import build_hf_model
    from tokenizer_factory import build_tokenizer

    build_hf_model("llama", folder, seed=0, max_position_embeddings=1024)
    build_tokenizer(folder, vocab_size=320)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="xgrammar,llguidance")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import torch

    from switchyard.llm import LLM

    torch.set_num_threads(1)
    cases = load_corpus(args.corpus)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        build_model(Path(tmp))
        for backend in args.backends.split(","):
            llm = LLM(
                model=tmp,
                dtype="float32",
                max_model_len=1024,
                kv_cache_memory=256 << 20,
                structured_outputs_backend=backend,
            )
            coverage = measure(llm, cases, (0.0, 1.0), args.max_tokens)
            results[backend] = {**asdict(coverage), "rates": coverage.rates()}
            print(backend, json.dumps(coverage.rates(), indent=1), coverage.rejections)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
