"""The quantization quality gate on the bundled model: int8, w8a8 (dynamic, and SmoothQuant-calibrated from a
checkpoint `switchyard quantize` writes) and int4, each against the unquantized model in the same run.

Calibration text is the training corpus's conversations (training seed, training entity lists), rendered by the
model's chat template; perplexity is scored on held-out conversations with their assistant replies (the gate's
held-out seed and entity lists); task accuracy on the first --limit cases of the `bundled-gate` suite. Writes
each gate's gate.json to benchmarks/results/quant/ and prints a Markdown table.

Usage: python benchmarks/quant_gate.py [--limit N] [--conversations N] [--methods int8,w8a8,w8a8-smooth,int4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "quant"
MODEL = "switchyard-chat"


def switchyard(*argv: str) -> int:
    return subprocess.run([sys.executable, "-m", "switchyard.cli", *argv], check=False).returncode


def write_conversations(path: Path, size: int, held_out: bool, as_text: bool) -> None:
    from switchyard.models.registry import resolve_model
    from switchyard.models.tokenizer import load_tokenizer
    from switchyard_training.corpus import CorpusConfig, generate_corpus, heldout_config

    config = heldout_config(size=size) if held_out else CorpusConfig(seed=0, size=size)
    tokenizer = load_tokenizer(resolve_model(MODEL))
    with path.open("w") as out:
        for example in generate_corpus(config):
            if as_text:
                text = tokenizer.apply_chat_template(example.messages, tools=example.tools, tokenize=False)
                out.write(json.dumps({"text": text}) + "\n")
            else:
                out.write(json.dumps({"messages": example.messages, "tools": example.tools}) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=400, help="bundled-gate cases per gate (400)")
    parser.add_argument("--conversations", type=int, default=200, help="held-out conversations scored (200)")
    parser.add_argument("--methods", default="int8,w8a8,w8a8-smooth,int4")
    args = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        held_out, calibration = work / "held-out.jsonl", work / "calibration.jsonl"
        write_conversations(held_out, args.conversations, held_out=True, as_text=False)
        write_conversations(calibration, 128, held_out=False, as_text=True)
        for method in args.methods.split(","):
            side = ["--quantization", method]
            if method == "w8a8-smooth":
                checkpoint = work / "w8a8-smooth"
                if switchyard("quantize", MODEL, "--calib", str(calibration), "--samples", "128",
                              "--out", str(checkpoint)) != 0:  # fmt: skip
                    raise SystemExit("switchyard quantize failed")
                side = ["--candidate", str(checkpoint)]
            output = work / f"gate-{method}"
            switchyard("eval", "quant", MODEL, *side, "--limit", str(args.limit), "--conversations",
                       str(held_out), "--no-progress", "--output-dir", str(output))  # fmt: skip
            result = json.loads((output / "gate.json").read_text())
            result["label"] = method
            result["model_root"] = MODEL if method != "w8a8-smooth" else f"switchyard quantize {MODEL} (w8a8)"
            (RESULTS / f"{method}.json").write_text(json.dumps(result, indent=2) + "\n")
            rows.append(result)
    print("| method | perplexity (base -> quantized) | greedy tokens equal | replies identical "
          "| bundled-gate success | verdict |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['label']} | {r['perplexity_base']:.4f} -> {r['perplexity_quantized']:.4f} "
            f"({100 * (r['perplexity_quantized'] / r['perplexity_base'] - 1):+.2f}%) "
            f"| {100 * r['token_agreement']:.1f}% | {100 * r['identical_replies']:.1f}% "
            f"| {100 * r['success_base']:.1f}% -> {100 * r['success_quantized']:.1f}% ({r['cases']} cases) "
            f"| {'pass' if r['passed'] else 'FAIL: ' + r['reason']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
