"""What speculative decoding with a draft model can gain at batch 1, from the cost of each forward pass.

Times three forward passes through the engine's `ModelRunner` (packed weights, paged KV cache, a prompt of
`--context` tokens already cached): one target decode step, one target verification of k + 1 positions, and one
draft decode step. A verify cycle costs k draft steps plus one verification and emits, when each proposal is
accepted with probability alpha independently, 1 + alpha + ... + alpha^k tokens; plain decoding emits one token
per target step. The ratio of the two rates is the ceiling of the speedup, before any scheduling, sampling or
bookkeeping cost. Needs no tokenizer: token ids are synthetic, only the shapes matter.

    python benchmarks/spec_ceiling.py --model <main folder> --draft-model <draft folder> --alpha 0.73
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from switchyard.engine.block_manager import BlockManager
from switchyard.engine.model_runner import ModelRunner
from switchyard.engine.sequence import Sequence
from switchyard.models.loader import load_model
from switchyard.models.packed_linear import can_pack, pack_linear_layers

BLOCK_SIZE = 16


def forward_ms(folder: str, dtype: torch.dtype, context: int, chunk: int, repeats: int) -> float:
    """Mean milliseconds of a forward pass over `chunk` new tokens after `context` cached ones."""
    model = load_model(folder, dtype)
    if can_pack(torch.device("cpu"), dtype):
        pack_linear_layers(model)
    num_blocks = -(-(context + chunk) // BLOCK_SIZE) + 1
    runner = ModelRunner(model, num_blocks, BLOCK_SIZE, dtype, torch.device("cpu"))
    blocks = BlockManager(num_blocks, BLOCK_SIZE)
    vocab = model.config.vocab_size
    seq = Sequence(seq_id=0, request=None, sample_index=0, token_ids=[i % vocab for i in range(context)])  # type: ignore[arg-type]
    blocks.allocate_slots(seq, context)
    runner.execute([(seq, context)], set())
    seq.num_computed_tokens = context
    seq.token_ids += [1] * chunk
    blocks.allocate_slots(seq, chunk)
    # A chunk of k + 1 is a verification: logits at every position, as the engine asks for them.
    verifying = frozenset([seq.seq_id]) if chunk > 1 else frozenset()
    for _ in range(10):  # recomputes the same positions: the cost is the same every time
        runner.execute([(seq, chunk)], set(), verifying)
    start = time.perf_counter()
    for _ in range(repeats):
        runner.execute([(seq, chunk)], set(), verifying)
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="target model folder")
    parser.add_argument("--draft-model", required=True, help="draft model folder")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--context", type=int, default=350, help="cached tokens before each step")
    parser.add_argument("--alpha", type=float, default=0.73, help="per-token acceptance rate")
    parser.add_argument("--ks", default="1,2,3,4", help="proposal lengths to report")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the median is reported")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    ks = [int(k) for k in args.ks.split(",")]
    with torch.inference_mode():
        samples: dict[str, list[float]] = {"target": [], "draft": []}
        samples.update({f"verify_{k}": [] for k in ks})
        for _ in range(args.rounds):
            samples["target"].append(forward_ms(args.model, dtype, args.context, 1, args.repeats))
            samples["draft"].append(forward_ms(args.draft_model, dtype, args.context, 1, args.repeats))
            for k in ks:
                samples[f"verify_{k}"].append(
                    forward_ms(args.model, dtype, args.context, k + 1, args.repeats)
                )
    cost = {name: sorted(values)[len(values) // 2] for name, values in samples.items()}
    print(f"target decode {cost['target']:.2f} ms, draft decode {cost['draft']:.2f} ms "
          f"(draft/target {cost['draft'] / cost['target']:.2f}), median of {args.rounds} rounds")  # fmt: skip
    rows = []
    for k in ks:
        tokens = sum(args.alpha**i for i in range(k + 1))
        cycle = k * cost["draft"] + cost[f"verify_{k}"]
        ceiling = tokens / cycle * cost["target"]
        perfect = (k + 1) / cycle * cost["target"]  # every proposal accepted
        row = {"k": k, "verify_ms": cost[f"verify_{k}"], "tokens_per_cycle": tokens, "ceiling": ceiling}
        rows.append(row | {"ceiling_all_accepted": perfect})
        print(
            f"k={k}: verify {cost[f'verify_{k}']:.2f} ms, {tokens:.2f} tokens a cycle, ceiling {ceiling:.2f}x "
            f"({perfect:.2f}x with every proposal accepted)"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "ms": cost, "rows": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
