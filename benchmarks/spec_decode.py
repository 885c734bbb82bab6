"""Speculative decoding (n-gram / prompt lookup, or a draft model) vs plain decoding, same prompts, same run.

Workload: copy tasks -- the model is asked to repeat a ~300-token passage (chat "Say exactly this: ..." on a
chat model), greedy, so outputs must be token-identical with and without speculation (checked). Reported per
batch size: output tokens/s of each and the speedup, end to end (prefill included) and for the decode phase
alone (each group's first token to its last: the issue's "decode tokens/s"), acceptance rate and mean tokens per
verifying step.
On a random-initialised model (the default when no --model is given) there is no real copying: greedy
decoding falls into loops that n-gram lookup predicts, so that run measures the mechanics, not the benefit.

With `--workload paragraph` (a chat model trained on the bundled corpus) the model is asked to repeat, or
repeat with one company name replaced, a ~300-token paragraph of held-out fact sentences, `--requests` of them
per batch size: copying natural text, where the passage of `copy` is a 35-word soup whose repeated word pairs
send an induction copy to the wrong place.

With `--workload tasks` the prompts are instead the bundled model's own held-out tasks (tool calls, JSON
extraction, grounded answers, chat: the gate's prompts), each batch size running `--requests` of them in
groups of that size: what the bundled pair is for, with replies of a few dozen tokens.

With `--workload json` the prompts are the held-out JSON-extraction tasks, each constrained to a schema of its
expected object's keys (structured outputs), and a third engine speculates with the draft unmasked by the
grammar (`spec_mask_drafts=False`), so the row also says what sampling drafts under the grammar is worth.

Usage: python benchmarks/spec_decode.py [--model switchyard-chat] [--batches 1,16,64] [--threads 1] [--json F]
       python benchmarks/spec_decode.py --model switchyard-chat --method draft --workload tasks --batches 1
       python benchmarks/spec_decode.py --model switchyard-chat --method speculator --workload tasks --batches 1
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from shapes import SMALL, build_qwen2

from switchyard import LLM, SamplingParams

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "bright",
    "stars",
    "watch",
    "silent",
    "rivers",
    "cross",
    "old",
    "stone",
    "bridges",
    "near",
    "quiet",
    "towns",
    "where",
    "merchants",
    "trade",
    "copper",
    "lamps",
    "silver",
    "rings",
    "and",
    "woven",
    "baskets",
    "every",
    "morning",
]


def passages(count: int, words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(count)]


def copy_prompts(llm: LLM, count: int, words: int) -> list[list[int]]:
    engine = llm.engine
    tokenizer = engine.tokenizer
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        from switchyard.models.tokenizer import render_chat

        return [
            render_chat(tokenizer, [{"role": "user", "content": f"Say exactly this: {text}"}])
            for text in passages(count, words)
        ]
    vocab = engine.model_config.vocab_size
    rng = random.Random(1)
    return [[rng.randrange(10, vocab) for _ in range(64)] for _ in range(count)]


def paragraph_prompts(llm: LLM, count: int, sentences: int) -> tuple[list[list[int]], list[str]]:
    """Copy-or-edit requests over paragraphs of held-out fact sentences (names the model never saw), the
    corpus's rewrite drill at benchmark length (`sentences` 18 is about 300 tokens), and the right replies."""
    from switchyard.agents.demo_world import ToolWorld
    from switchyard.models.tokenizer import render_chat
    from switchyard_training.entities import HELDOUT_ENTITIES
    from switchyard_training.tasks.context import TaskContext
    from switchyard_training.tasks.copy_drill import fact_paragraph, rewrite_request

    world = ToolWorld.build(HELDOUT_ENTITIES, 0)
    prompts, replies = [], []
    for index in range(count):
        ctx = TaskContext(random.Random(f"spec-paragraph:{index}"), HELDOUT_ENTITIES, world)
        request, reply, _ = rewrite_request(ctx, *fact_paragraph(ctx, sentences))
        prompts.append(render_chat(llm.engine.tokenizer, [{"role": "user", "content": request}]))
        replies.append(reply)
    return prompts, replies


def copy_fidelity(llm: LLM, outputs: list[list[int]], replies: list[str]) -> dict[str, float]:
    """How well the plain outputs repeat what was asked: a speedup on replies that are not copies measures the
    model's own loops, not prompt lookup on a copy."""
    texts = [llm.engine.tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in outputs]
    return {
        "copied_exactly": sum(t == r for t, r in zip(texts, replies, strict=True)) / len(replies),
        "copy_similarity": sum(
            difflib.SequenceMatcher(None, t, r).ratio() for t, r in zip(texts, replies, strict=True)
        )
        / len(replies),
    }


def task_prompts(llm: LLM, count: int) -> list[list[int]]:
    """The first `count` graded prompts of the bundled model's held-out corpus, rendered with its template."""
    from switchyard.models.tokenizer import render_chat
    from switchyard_training.corpus import generate_corpus, heldout_config

    turns = [
        (example, turn)
        for example in generate_corpus(heldout_config(size=count))
        for turn in sorted({check.turn for check in example.checks})
    ]
    tokenizer = llm.engine.tokenizer
    return [render_chat(tokenizer, ex.messages[:turn], tools=ex.tools) for ex, turn in turns[:count]]


def json_tasks(
    llm: LLM, count: int, max_tokens: int, temperature: float
) -> tuple[list[list[int]], list[SamplingParams]]:
    """The held-out JSON-extraction prompts, each with params constrained to an object of exactly its expected
    keys (values: strings, numbers or null), as a caller passing a response schema would; sampled requests
    are seeded by their index."""
    from switchyard.engine.structured.params import StructuredOutputsParams
    from switchyard.models.tokenizer import render_chat
    from switchyard_training.corpus import generate_corpus, heldout_config
    from switchyard_training.example import CheckKind

    prompts, params = [], []
    examples = generate_corpus(heldout_config(size=max(200, 8 * count)))
    for example in examples:
        for check in example.checks:
            if check.kind != CheckKind.JSON or check.json_object is None or len(prompts) == count:
                continue
            keys = list(check.json_object)
            schema = {
                "type": "object",
                "properties": {key: {"type": ["string", "number", "null"]} for key in keys},
                "required": keys,
                "additionalProperties": False,
            }
            prompts.append(
                render_chat(llm.engine.tokenizer, example.messages[: check.turn], tools=example.tools)
            )
            params.append(
                SamplingParams(
                    temperature=temperature,
                    seed=len(params),
                    max_tokens=max_tokens,
                    structured_outputs=StructuredOutputsParams(json=schema),
                )
            )
    return prompts, params


def timed(
    llm: LLM,
    prompts: list[list[int]],
    params: SamplingParams | list[SamplingParams],
    batch: int | None = None,
    decode: list[float] | None = None,
) -> tuple[float, list[list[int]]]:
    """Seconds to generate for all prompts, `batch` at a time (default: all together), and the outputs. With
    `decode`, appends each group's decode seconds (its first token to its last finish): the decode phase alone,
    without the prompt's prefill."""
    batch = batch or len(prompts)
    start = time.perf_counter()
    outputs = []
    for first in range(0, len(prompts), batch):
        chunk = params[first : first + batch] if isinstance(params, list) else params
        group = llm.generate(prompts[first : first + batch], chunk, use_tqdm=False)
        if decode is not None:
            firsts = [o.metrics.first_token_time for o in group if o.metrics is not None]
            lasts = [o.metrics.finished_time for o in group if o.metrics is not None]
            decode.append(max(t for t in lasts if t is not None) - min(t for t in firsts if t is not None))
        outputs += group
    return time.perf_counter() - start, [o.outputs[0].token_ids for o in outputs]


def warm_up(
    llm: LLM, prompts: list[list[int]], params: SamplingParams | list[SamplingParams], batch: int
) -> None:
    """One untimed group at this batch size: the KV cache's pages are touched for the first time (page faults)
    and the kernels see their shapes before the timed run. Without it the first engine timed at a new, larger
    batch size measured up to 2x slow."""
    group = params[:batch] if isinstance(params, list) else params
    timed(llm, prompts[:batch], group, batch)


def decode_tokens(outputs: list[list[int]]) -> int:
    """Tokens of the decode phase: all but each request's first (which the prefill step produces)."""
    return sum(max(0, len(t) - 1) for t in outputs)


def speculated(
    llm: LLM,
    prompts: list[list[int]],
    params: SamplingParams | list[SamplingParams],
    batch: int,
    plain_s: float,
    plain_out: list[list[int]],
    plain_decode_tok_s: float,
    prefix: str = "",
) -> dict[str, object]:
    """A speculating engine's row against plain decoding's: tokens/s, speedup, identical outputs, and the
    acceptance rate and tokens per verifying step of this run alone (after a warm-up)."""
    warm_up(llm, prompts, params, batch)
    stats = llm.engine.spec_decoder.stats  # type: ignore[union-attr]
    before = (stats.steps, stats.proposed, stats.accepted, stats.emitted)
    decode: list[float] = []
    seconds, outputs = timed(llm, prompts, params, batch, decode)
    after = (stats.steps, stats.proposed, stats.accepted, stats.emitted)
    steps, proposed, accepted, emitted = (now - then for now, then in zip(after, before, strict=True))
    tokens = sum(len(t) for t in outputs)
    decode_tok_s = decode_tokens(outputs) / sum(decode)
    return {
        f"{prefix}spec_tok_s": tokens / seconds,
        f"{prefix}speedup": plain_s / seconds * tokens / max(1, sum(len(t) for t in plain_out)),
        f"{prefix}spec_decode_tok_s": decode_tok_s,
        f"{prefix}decode_speedup": decode_tok_s / plain_decode_tok_s,
        f"{prefix}identical": plain_out == outputs,
        f"{prefix}acceptance_rate": accepted / proposed if proposed else 0.0,
        f"{prefix}tokens_per_verify_step": emitted / steps if steps else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench/small"))
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--words", type=int, default=220, help="passage length in words (~300 tokens)")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--method", choices=("ngram", "draft", "speculator"), default="ngram")
    parser.add_argument(
        "--draft-model",
        default=None,
        help="draft or speculator folder (default with switchyard-chat: its draft or its speculator)",
    )
    parser.add_argument("--workload", choices=("copy", "paragraph", "tasks", "json"), default="copy")
    parser.add_argument(
        "--sentences", type=int, default=18, help="sentences per paragraph with --workload paragraph"
    )
    parser.add_argument(
        "--requests", type=int, default=64, help="prompts per batch size with --workload tasks or json"
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--adaptive", action="store_true", help="let the governor choose per step (--spec-adaptive)"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="sample, seeded per request (outputs then differ from plain decoding's, so compare rates only)",
    )
    parser.add_argument(
        "--ignore-eos",
        action="store_true",
        help="every request runs --max-tokens (steady batches: without it, short replies leave a long tail of "
        "few sequences, where speculation pays at any starting batch size)",
    )
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = args.model or str(build_qwen2(args.workdir, SMALL))
    batches = [int(b) for b in args.batches.split(",")]
    common = dict(
        model=model,
        dtype=args.dtype,
        max_num_seqs=max(batches),
        max_model_len=2048,
        skip_tokenizer=args.model is None,  # the random model's folder has no tokenizer: token-id prompts
    )
    if args.workload == "json" and (args.model is None or args.method == "ngram"):
        parser.error("--workload json needs a chat model (--model) and --method draft or speculator")
    plain = LLM(**common)  # type: ignore[arg-type]
    speculative = dict(
        speculative_method=args.method,
        speculative_model=args.draft_model,
        num_speculative_tokens=args.k,
        spec_max_batch_size=max(batches),
        spec_adaptive=args.adaptive,
    )
    spec = LLM(**common, **speculative)  # type: ignore[arg-type]
    unmasked = None
    if args.workload == "json":
        unmasked = LLM(**common, **speculative, spec_mask_drafts=False)  # type: ignore[arg-type]
    ignore_eos = args.model is None or args.ignore_eos
    params: SamplingParams | list[SamplingParams] = SamplingParams(
        temperature=0, max_tokens=args.max_tokens, ignore_eos=ignore_eos
    )
    results = []
    for batch in batches:
        replies: list[str] = []
        if args.workload == "json":
            prompts, params = json_tasks(plain, max(batch, args.requests), args.max_tokens, args.temperature)
        elif args.workload == "tasks":
            prompts = task_prompts(plain, max(batch, args.requests))
        elif args.workload == "paragraph":
            prompts, replies = paragraph_prompts(plain, max(batch, args.requests), args.sentences)
        else:
            prompts = copy_prompts(plain, batch, args.words)
        if args.temperature > 0 and args.workload != "json":
            params = [
                SamplingParams(
                    temperature=args.temperature, seed=i, max_tokens=args.max_tokens, ignore_eos=ignore_eos
                )
                for i in range(len(prompts))
            ]
        warm_up(plain, prompts, params, batch)
        plain_decode: list[float] = []
        plain_s, plain_out = timed(plain, prompts, params, batch, plain_decode)
        tokens = sum(len(t) for t in plain_out)
        plain_decode_tok_s = decode_tokens(plain_out) / sum(plain_decode)
        row: dict[str, object] = {
            "batch": batch,
            "output_tokens": tokens,
            "plain_tok_s": tokens / plain_s,
            "plain_decode_tok_s": plain_decode_tok_s,
        }
        for prefix, llm in (("", spec), ("unmasked_", unmasked)):
            if llm is not None:
                row.update(
                    speculated(llm, prompts, params, batch, plain_s, plain_out, plain_decode_tok_s, prefix)
                )
        if replies:
            row.update(copy_fidelity(plain, plain_out, replies))
        results.append(row)
        print(json.dumps(row))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "model": args.model or "random SMALL shape (shapes.py)",
                    "method": args.method,
                    "workload": args.workload,
                    "k": args.k,
                    "threads": torch.get_num_threads(),
                    "adaptive": args.adaptive,
                    "results": results,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
