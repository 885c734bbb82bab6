"""Throughput with a JSON schema on every request vs unconstrained, same workload, same run.

Workload: N requests decoded together (batch N), O output tokens each: the unconstrained run sets ignore_eos,
the constrained run asks for an article object (title, tags, body: free-text strings), which a random model
stays inside for far longer than O tokens, so both runs compute (almost exactly) N x O tokens; throughput is
per generated token either way. Reported:
output tokens/s of each, the ratio, and the grammar's per-step cost (bitmask fill + apply) at batch N and its
share of the step time. Runs alternate (U, C, U, C, ...) and the best of each is kept, to damp machine noise.

The model is `--model` (e.g. switchyard-chat once built) or, by default, a random SMALL-shaped Qwen2 with a
byte-level BPE tokenizer of 8k tokens trained on the bundled corpus generator's text (a realistic vocabulary
for the mask cost, which grows with vocabulary size).

Usage: python benchmarks/structured_throughput.py [--batch 64] [--output-tokens 128] [--repeats 2] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from shapes import SMALL, build_qwen2

from switchyard import LLM, SamplingParams
from switchyard.engine.structured.params import StructuredOutputsParams

ARTICLE = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 80},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "body": {"type": "string"},
    },
    "required": ["title", "tags", "body"],
    "additionalProperties": False,
}


def build_default_model(folder: Path) -> Path:
    """SMALL-shaped Qwen2 + an 8k byte-level BPE tokenizer trained on the bundled corpus (cached in folder)."""
    if (folder / "tokenizer.json").is_file():
        return folder
    from transformers import PreTrainedTokenizerFast

    from switchyard_training.chat_format import CHAT_TEMPLATE
    from switchyard_training.corpus import CorpusConfig, generate_corpus
    from switchyard_training.tokenizer_training import corpus_texts, train_tokenizer

    tokenizer = train_tokenizer(corpus_texts(generate_corpus(CorpusConfig(seed=1, size=4000))), 8192)
    vocab = -(-tokenizer.get_vocab_size() // 64) * 64
    build_qwen2(folder, {**SMALL, "vocab_size": vocab})
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(folder)
    return folder


def run_once(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> tuple[float, int, int]:
    """(seconds, output tokens, engine steps) of one batch."""
    engine = llm.engine
    original_step = engine.step
    count = [0]

    def counted_step():  # type: ignore[no-untyped-def]
        count[0] += 1
        return original_step()

    engine.step = counted_step  # type: ignore[method-assign]
    start = time.perf_counter()
    outputs = llm.generate(prompts, [params] * len(prompts), use_tqdm=False)
    seconds = time.perf_counter() - start
    engine.step = original_step  # type: ignore[method-assign]
    return seconds, sum(len(o.outputs[0].token_ids) for o in outputs), count[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model folder or bundled name (default: built SMALL)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench/structured-small"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--backend", default="xgrammar", help="structured-output backend: xgrammar or llguidance"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = args.model or str(build_default_model(args.workdir))
    llm = LLM(
        model=model,
        dtype=args.dtype,
        max_num_seqs=args.batch,
        max_model_len=1024,
        structured_outputs_backend=args.backend,
    )
    vocab = llm.engine.model_config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(10, min(vocab, 8000), (args.prompt_tokens,), generator=generator).tolist()
        for _ in range(args.batch)
    ]
    unconstrained = SamplingParams(temperature=1.0, seed=1, max_tokens=args.output_tokens, ignore_eos=True)
    spec = StructuredOutputsParams(json=ARTICLE)
    constrained = SamplingParams(
        temperature=1.0, seed=1, max_tokens=args.output_tokens, structured_outputs=spec
    )
    llm.generate(prompts[:2], [unconstrained, constrained], use_tqdm=False)  # warm-up + grammar compile
    manager = llm.engine.structured_outputs
    best = {"unconstrained": float("inf"), "constrained": float("inf")}
    tokens = {}
    mask = []
    for _ in range(args.repeats):
        for name, params in (("unconstrained", unconstrained), ("constrained", constrained)):
            mask_before, rows_before = manager.stats.mask_seconds, manager.stats.masked_rows
            seconds, generated, steps = run_once(llm, prompts, params)
            best[name] = min(best[name], seconds)
            tokens[name] = generated
            if name == "constrained":
                mask.append(
                    {
                        "mask_seconds_per_step": (manager.stats.mask_seconds - mask_before) / steps,
                        "step_seconds": seconds / steps,
                        "rows_per_step": (manager.stats.masked_rows - rows_before) / steps,
                    }
                )
    throughput = {k: tokens[k] / best[k] for k in best}
    per_step = min(mask, key=lambda m: m["mask_seconds_per_step"])
    result = {
        "model": model,
        "backend": args.backend,
        "vocab_size": vocab,
        "batch": args.batch,
        "output_tokens": args.output_tokens,
        "tokens": tokens,
        "tokens_per_s": throughput,
        "constrained_over_unconstrained": throughput["constrained"] / throughput["unconstrained"],
        "mask_ms_per_step": 1000 * per_step["mask_seconds_per_step"],
        "step_ms": 1000 * per_step["step_seconds"],
        "mask_share_of_step": per_step["mask_seconds_per_step"] / per_step["step_seconds"],
        "masked_rows_per_step": per_step["rows_per_step"],
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
