"""Perplexity over a long text: the plain model, a sliding window, and a window with attention sinks.

The bundled model (`switchyard-chat`, trained on rows of 1152 tokens, max_position_embeddings 2048) reads a
long text teacher-forced as one prompt: by default held-out conversations of the kind it was trained on
(`switchyard_training.corpus.heldout_config`, rendered by its chat template and concatenated, as training
packed them), or with `--text docs` the project's own documentation (docs/*.md, ARCHITECTURE.md, README.md),
which it has never seen the like of. It runs through the engine with prompt logprobs: chunked prefill, the KV blocks that
leave the window released as the prompt advances. Perplexity is reported per segment of positions, so where
each mode breaks shows. The plain model cannot take a prompt past its max_model_len (2048) at all: it is
measured on its first 2047 tokens (one position stays for the token it generates), and the engine's refusal of the whole text is recorded.

Usage: python benchmarks/long_context_perplexity.py [--tokens 8192] [--window 1020] [--sinks 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.errors import InvalidRequestError
from switchyard.models.registry import MAIN_MODEL, resolve_model

ROOT = Path(__file__).resolve().parent.parent
SEGMENTS = ((1, 1024), (1024, 2048), (2048, 4096), (4096, 8192), (8192, 16384))


def docs_text() -> str:
    files = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "ARCHITECTURE.md", ROOT / "README.md"]
    return "\n\n".join(path.read_text() for path in files)


def heldout_text(tokenizer: Any, conversations: int = 400) -> str:
    from switchyard_training.corpus import generate_corpus, heldout_config

    return "".join(
        tokenizer.apply_chat_template(example.messages, tools=example.tools, tokenize=False)
        for example in generate_corpus(heldout_config(size=conversations))
    )


def engine_for(max_model_len: int, **long_context: int | None) -> LLMEngine:
    config = EngineConfig(
        model=str(resolve_model(MAIN_MODEL)),
        dtype="float32",
        max_model_len=max_model_len,
        max_num_batched_tokens=512,
        block_size=16,
        kv_cache_memory=64 << 20,
        enable_prefix_caching=False,
        **long_context,  # type: ignore[arg-type]
    )
    return LLMEngine(config)


def prompt_logprobs(engine: LLMEngine, tokens: list[int]) -> tuple[list[float], int]:
    """Teacher-forced logprob of every token after the first, and the most KV blocks held at once."""
    engine.add_request("text", tokens, SamplingParams(max_tokens=1, prompt_logprobs=0))
    peak = 0
    logprobs: list[float] = []
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished and output.prompt_logprobs is not None:
                logprobs = [entry.logprob for entry in output.prompt_logprobs if entry is not None]
        peak = max(peak, engine.block_manager.num_used_blocks)
    return logprobs, peak


def restarted(engine: LLMEngine, tokens: list[int], piece: int) -> dict[str, object]:
    """The text's difficulty by segment, for reference: each `piece` tokens read as a prompt of its own (the
    first token of a piece, predicted from no context, is left out)."""
    logprobs: list[float] = []
    for start in range(0, len(tokens), piece):
        values, _ = prompt_logprobs(engine, tokens[start : start + piece])
        logprobs += [math.nan] * (start > 0) + values  # logprobs[i] still predicts token i + 1
    return {"perplexity_by_positions": by_segment(logprobs)}


def by_segment(logprobs: list[float]) -> dict[str, float]:
    """Perplexity over the predictions of positions [start, end) (logprobs[i] predicts token i + 1; NaN: no
    prediction there)."""
    out = {}
    for start, end in SEGMENTS:
        part = logprobs[start - 1 : end - 1]
        known = [value for value in part if not math.isnan(value)]
        if known:
            out[f"{start}-{start - 1 + len(part)}"] = math.exp(-sum(known) / len(known))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=8192, help="length of the text read (tokens)")
    parser.add_argument("--window", type=int, default=1020)
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--text", choices=("heldout", "docs"), default="heldout")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    plain = engine_for(2048)
    assert plain.tokenizer is not None
    text = heldout_text(plain.tokenizer) if args.text == "heldout" else docs_text()
    tokens = plain.tokenizer.encode(text, add_special_tokens=False)
    if len(tokens) < args.tokens:
        raise SystemExit(f"the text has only {len(tokens)} tokens")
    tokens = tokens[: args.tokens]
    results: dict[str, object] = {"text": args.text, "tokens": len(tokens), "block_size": 16}
    try:
        plain.add_request("whole", tokens, SamplingParams(max_tokens=1, prompt_logprobs=0))
        results["plain_whole_text"] = "accepted"
    except InvalidRequestError as exc:
        results["plain_whole_text"] = f"refused: {exc}"
    modes = {
        "plain (first 2047 tokens)": (plain, tokens[:2047]),
        f"window {args.window + args.sinks}": (
            engine_for(len(tokens) + 1, sliding_window=args.window + args.sinks),
            tokens,
        ),
        f"sinks {args.sinks} + window {args.window}": (
            engine_for(len(tokens) + 1, sliding_window=args.window, attention_sinks=args.sinks),
            tokens,
        ),
    }
    runs: dict[str, object] = {"plain, restarted every 1024 tokens": restarted(plain, tokens, 1024)}
    print(runs, flush=True)
    for name, (engine, stream) in modes.items():
        started = time.perf_counter()
        logprobs, peak = prompt_logprobs(engine, stream)
        runs[name] = {
            "perplexity_by_positions": by_segment(logprobs),
            "peak_kv_blocks": peak,
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(name, runs[name], flush=True)
    results["runs"] = runs
    report = json.dumps(results, indent=2)
    print(report)
    if args.json:
        args.json.write_text(report + "\n")


if __name__ == "__main__":
    main()
