"""`switchyard quantize`: write an int8 or w8a8 checkpoint that `switchyard serve` loads as it is.

switchyard quantize switchyard-chat --calib calib.txt --out chat-w8a8            # w8a8, SmoothQuant
switchyard quantize ./my-model --method int8 --out my-model-int8                   # weights only
switchyard serve chat-w8a8                                                         # no flag needed
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from switchyard.errors import ModelLoadError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard quantize",
        description="Quantize a model folder's decoder projections to int8 (compressed-tensors layout). Check "
        "the result with `switchyard eval quant` before serving it.",
    )
    parser.add_argument("model", help="bundled model name or Hugging Face model folder")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (must not exist)")
    parser.add_argument(
        "--method",
        choices=("w8a8", "int8"),
        default="w8a8",
        help="w8a8: int8 weights smoothed for per-token int8 activations (needs --calib); int8: weights only",
    )
    parser.add_argument(
        "--calib", type=Path, default=None, help="calibration text: one sample per line, or JSONL with `text`"
    )
    parser.add_argument("--alpha", type=float, default=0.5, help="SmoothQuant's migration strength (0.5)")
    parser.add_argument("--samples", type=int, default=64, help="calibration samples used (64)")
    parser.add_argument("--max-tokens", type=int, default=512, help="tokens per calibration sample (512)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    from switchyard.models.quantization.writer import QuantizeJob, quantize_checkpoint
    from switchyard.models.registry import resolve_model

    try:
        job = QuantizeJob(
            source=resolve_model(args.model),
            output=args.out,
            method=args.method,
            calibration=args.calib,
            alpha=args.alpha,
            samples=args.samples,
            max_tokens=args.max_tokens,
        )
        written = quantize_checkpoint(job)
    except (ModelLoadError, ValueError, OSError) as exc:
        print(f"switchyard quantize: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.method} checkpoint to {written}; check it with `switchyard eval quant`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
