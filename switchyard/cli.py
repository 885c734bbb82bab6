"""`switchyard` command line: serve, generate, and the operator tools as they land."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """Engine flags shared by every command that loads a model (names follow vLLM's)."""
    group = parser.add_argument_group("engine")
    group.add_argument(
        "--dtype", default="auto", help="float32, bfloat16, float16 or auto (checkpoint dtype)"
    )
    group.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    group.add_argument("--block-size", type=int, default=16, help="tokens per KV cache block")
    group.add_argument("--max-model-len", type=int, default=None, help="context length to serve")
    group.add_argument("--max-num-seqs", type=int, default=256, help="sequences running at once")
    group.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="token budget per step (default 512 CPU / 4096 CUDA)",
    )
    group.add_argument("--kv-cache-memory", type=int, default=None, help="KV cache size in bytes")
    group.add_argument(
        "--memory-utilization",
        type=float,
        default=None,
        help="fraction of device memory (CPU: of available RAM) for weights + activations + KV cache",
    )
    group.add_argument("--seed", type=int, default=0, help="seed of the shared random stream")


def engine_config_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from switchyard.config import EngineConfig

    return EngineConfig(
        model=args.model,
        dtype=args.dtype,
        device=args.device,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_memory=args.kv_cache_memory,
        memory_utilization=args.memory_utilization,
        seed=args.seed,
    )


def cmd_generate(args: argparse.Namespace) -> int:
    from switchyard.engine.sampling_params import SamplingParams
    from switchyard.llm import LLM

    llm = LLM(config=engine_config_from_args(args))
    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.sampling_seed
    )
    prompts = args.prompt or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if args.chat:
        outputs = llm.chat([[{"role": "user", "content": p}] for p in prompts], params)
    else:
        outputs = llm.generate(prompts, params)
    for prompt, output in zip(prompts, outputs, strict=True):
        print(f"### {prompt}\n{output.outputs[0].text}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard", description="LLM inference serving with an agent runtime."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log engine details (KV budget, ...)")
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="generate completions for prompts offline")
    generate.add_argument("prompt", nargs="*", help="prompts (read from stdin, one per line, when omitted)")
    generate.add_argument("--model", default="switchyard-chat", help="bundled model name or HF model folder")
    generate.add_argument("--chat", action="store_true", help="wrap each prompt as a user chat message")
    generate.add_argument("--max-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--sampling-seed", type=int, default=None, help="per-request sampling seed")
    add_engine_args(generate)
    generate.set_defaults(func=cmd_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    from switchyard.errors import SwitchyardError

    try:
        return int(args.func(args) or 0)
    except (SwitchyardError, ValueError) as exc:
        print(f"switchyard: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
