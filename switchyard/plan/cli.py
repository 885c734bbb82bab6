"""`switchyard plan MODEL --device DEV`: weights, KV per token, KV blocks, concurrency, decode-step bounds."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from switchyard.engine_args import KV_CACHE_DTYPE_NAMES
from switchyard.kv_budget import (
    DEFAULT_MEMORY_UTILIZATION_CPU,
    DEFAULT_MEMORY_UTILIZATION_GPU,
    default_memory_utilization,
)
from switchyard.plan.capacity import PlanInputs, make_plan
from switchyard.plan.devices import DEVICE_PRESETS, parse_device
from switchyard.plan.shapes import NAMED_SHAPES

GiB = 1 << 30


def _positive_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _positive_int(text: str) -> int:
    return _positive_ints(text)[0] if "," not in text else _fail(text)


def _fail(text: str) -> int:
    raise argparse.ArgumentTypeError(f"expected one positive integer, got {text!r}")


def _bandwidth(text: str) -> float:
    """GB/s: a positive, finite number (zero or less would give no bound, or a negative one)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a bandwidth in GB/s, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"bandwidth must be a positive number of GB/s, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard plan",
        description="How much of MODEL fits on a device: weight bytes, KV bytes per token, KV blocks, "
        "concurrent sequences at given lengths, and a memory-bandwidth lower bound on the decode step. "
        "Arithmetic only: nothing is loaded or downloaded.",
    )
    parser.add_argument(
        "model",
        help=f"a model folder, a config.json, or a named shape ({', '.join(NAMED_SHAPES)})",
    )
    parser.add_argument(
        "--device",
        required=True,
        help=f"a preset ({', '.join(DEVICE_PRESETS)}), cpu:RAM (e.g. cpu:24g) or a memory size (e.g. 40GiB)",
    )
    parser.add_argument(
        "--bandwidth",
        type=_bandwidth,
        default=None,
        help="memory read bandwidth in GB/s (overrides the preset's)",
    )
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    parser.add_argument(
        "--kv-dtype",
        "--kv-cache-dtype",
        dest="kv_dtype",
        default="auto",
        choices=KV_CACHE_DTYPE_NAMES,
        help="KV cache storage dtype, as the engine's --kv-cache-dtype (auto: the model's dtype)",
    )
    parser.add_argument(
        "--quantization",
        default="auto",
        choices=("auto", "none", "int8", "fp8", "int4"),
        help="weight-only quantization of the decoder projections (embeddings, LM head and norms stay in dtype); "
        "auto: as the folder's pre-quantized checkpoint is served (GPTQ/AWQ/compressed-tensors int4 as int4, "
        "int8/w8a8 as int8, fp8 and 8-bit GPTQ dequantized to dtype), else none",
    )
    parser.add_argument("--max-model-len", type=_positive_int, default=None, help="default: the model's")
    parser.add_argument("--tensor-parallel-size", "-tp", type=_positive_int, default=1)
    parser.add_argument("--block-size", type=_positive_int, default=16)
    parser.add_argument(
        "--memory-utilization",
        type=_fraction,
        default=None,
        help=f"fraction of memory used ({DEFAULT_MEMORY_UTILIZATION_GPU:g} GPU, {DEFAULT_MEMORY_UTILIZATION_CPU:g} CPU)",
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=_positive_int,
        default=None,
        help="token budget per step, which sizes the activation reserve (4096 GPU, 512 CPU)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=_positive_int,
        default=PlanInputs.max_num_seqs,
        help="the engine's cap on sequences running at once, as in serve (default %(default)s)",
    )
    parser.add_argument(
        "--seq-lens", type=_positive_ints, default=(1024, 4096), help="lengths for the concurrency table"
    )
    parser.add_argument("--batch-sizes", type=_positive_ints, default=(1, 8, 32, 128))
    parser.add_argument(
        "--context-len", type=_positive_int, default=None, help="tokens per sequence in the decode bound"
    )
    parser.add_argument(
        "--speculative-model",
        default=None,
        help="a draft model (same forms as MODEL) whose weights and KV cache share the memory, as in serve; "
        "or a speculator folder (switchyard-chat-speculator), which adds weights and no KV cache",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return parser


def load_config(model: str):  # type: ignore[no-untyped-def]
    """A named shape, a folder with config.json, a config.json file, or a bundled model name.

    Raises ValueError for a missing file, or the loader's ModelLoadError for a file that is not a config object
    or a shape with a size that is not positive (which would otherwise plan nonsense).
    """
    from switchyard.models.config import ModelArchConfig

    if model.lower() in NAMED_SHAPES:
        return ModelArchConfig.from_dict(NAMED_SHAPES[model.lower()], model)
    path = Path(model).expanduser()
    if not path.is_file():
        from switchyard.models.registry import resolve_model

        path = Path(resolve_model(model)) / "config.json"
        if not path.is_file():
            raise ValueError(f"no config.json in {path.parent}")
    return ModelArchConfig.from_dict(json.loads(path.read_text()), str(path))


def _quantization(flag: str, model: str) -> tuple[str, int]:
    """(--quantization, int4 group size), or for auto what the engine holds for the model folder's stored
    weights and the group its int4 kernel runs (the checkpoint's; per-channel grids run in groups of 128)."""
    if flag != "auto":
        return flag, 128
    path = Path(model).expanduser()
    path = path if path.is_file() else path / "config.json"
    if not path.is_file():
        return "none", 128  # a named shape or bundled model: unquantized
    from switchyard.models.quantization.schemes import parse_quantization_config

    raw = json.loads(path.read_text())
    scheme = parse_quantization_config(raw, str(path)) if isinstance(raw, dict) else None
    if scheme is None:
        return "none", 128
    return scheme.planned_method, scheme.group_size or 128


def load_speculator_config(model: str):  # type: ignore[no-untyped-def]
    """The config of a speculator folder (or bundled speculator name), or None when `model` is not one."""
    from switchyard.models.registry import BUNDLED_MODELS
    from switchyard.models.speculator import CONFIG_FILE, SpeculatorConfig, is_speculator_folder

    folder = BUNDLED_MODELS.get(model, Path(model).expanduser())
    if not is_speculator_folder(folder):
        return None
    return SpeculatorConfig.from_json(json.loads((folder / CONFIG_FILE).read_text()))


def _gib(num: float) -> str:
    return f"{num / GiB:,.2f} GiB"


def _usable(plan) -> str:  # type: ignore[no-untyped-def]
    """How the usable memory was worked out: on a CPU the fraction applies to the RAM the weights leave."""
    inputs = plan.inputs
    memory, fraction = _gib(inputs.device.memory_bytes), f"{inputs.memory_utilization:g}"
    if inputs.device.is_cpu:
        weights = _gib(plan.weights_bytes_per_device + plan.draft_weights_bytes)
        return f"({memory} - {weights} weights) x {fraction} = {_gib(plan.usable_bytes)}"
    return f"{memory} x {fraction} = {_gib(plan.usable_bytes)}"


def render(plan) -> str:  # type: ignore[no-untyped-def]
    inputs = plan.inputs
    params = plan.params
    lines = [
        f"model {inputs.model_name} ({inputs.config.architecture}), {params.total / 1e9:.3f}B parameters "
        f"({params.total:,}): embedding {params.embedding:,}, LM head {params.lm_head:,}"
        f"{' (tied)' if not params.lm_head else ''}, projections {params.linear:,}, norms/biases {params.other:,}",
        *(
            [
                f"mixture of experts: {moe.num_experts} experts, top {moe.top_k}, "
                f"{len(moe.sparse_layers)} sparse layers; {params.active / 1e9:.3f}B parameters active per token "
                f"({params.active:,}) of {params.total / 1e9:.3f}B held; a decode step reads the experts its "
                f"batch is routed to (expected under uniform routing)"
            ]
            if (moe := inputs.config.moe) is not None and params.experts
            else []
        ),
        f"device {inputs.device.name}: {_usable(plan)} usable; dtype {plan.dtype}, KV dtype {plan.kv_dtype}, "
        f"quantization {inputs.quantization}, tensor parallel {inputs.tensor_parallel}",
        "",
        f"{'weights per device':<34}{_gib(plan.weights_bytes_per_device):>16}",
        f"{'activation reserve':<34}{_gib(plan.activation_bytes):>16}"
        f"   ({inputs.max_num_batched_tokens} tokens per step)",
        f"{'KV cache budget':<34}{_gib(max(plan.kv_budget_bytes, 0)):>16}",
        f"{'KV bytes per token per device':<34}{plan.kv_bytes_per_token_per_device:>16,}"
        f"   (2 x {inputs.config.num_hidden_layers} layers x {plan.kv_heads_per_device} KV heads x "
        f"{inputs.config.head_dim} head_dim x bytes)",
        *(
            [
                f"{'draft weights (speculative)':<34}{_gib(plan.draft_weights_bytes):>16}",
                f"{'draft KV bytes per token':<34}{plan.draft_kv_bytes_per_token:>16,}"
                "   (a draft block beside every target block)",
            ]
            if inputs.draft_config is not None
            else [
                f"{'speculator weights (speculative)':<34}{_gib(plan.draft_weights_bytes):>16}   (no KV cache)"
            ]
            if inputs.speculator_parameters
            else []
        ),
        f"{'KV blocks':<34}{plan.num_blocks:>16,}   ({inputs.block_size} tokens each, "
        f"{plan.kv_cache_tokens:,} tokens)",
        "",
        "max concurrent sequences:",
    ]
    for length, count in plan.concurrency.items():
        notes = ["max_model_len"] if length == plan.max_model_len else []
        if plan.running(length) < count:
            notes.append(f"the engine runs {plan.running(length):,} at once: --max-num-seqs")
        note = f"  ({'; '.join(notes)})" if notes else ""
        lines.append(f"  {length:>8,} tokens  {count:>10,}{note}")
    if not plan.fits:
        lines.append(
            f"  DOES NOT FIT: not even one {plan.max_model_len}-token sequence fits beside the weights"
        )
    lines += [
        "",
        f"decode step lower bound from memory bandwidth (context {plan.decode[0].context_len} tokens):",
    ]
    if inputs.device.bandwidth_bytes_per_s is None:
        lines.append("  (bandwidth unknown: pass --bandwidth GB/s)")
    else:
        lines.append(f"  bandwidth {inputs.device.bandwidth_bytes_per_s / 1e9:,.0f} GB/s")
        lines.append(f"  {'batch':>8}  {'GiB read/step':>14}  {'step ms >=':>11}  {'tokens/s <=':>12}")
        for bound in plan.decode:
            fits = "" if bound.fits else "  (KV does not fit)"
            lines.append(
                f"  {bound.batch_size:>8}  {bound.bytes_per_step / GiB:>14.3f}  {bound.step_seconds * 1e3:>11.3f}"
                f"  {bound.tokens_per_s:>12,.0f}{fits}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        device = parse_device(args.device, args.bandwidth)
    except ValueError as exc:
        parser.error(str(exc))
    from switchyard.errors import SwitchyardError

    try:
        config = load_config(args.model)
        quantization, int4_group_size = _quantization(args.quantization, args.model)
    except (SwitchyardError, OSError, ValueError) as exc:
        parser.error(f"cannot read model {args.model!r}: {exc}")
    draft_config = None
    speculator_parameters = 0
    if args.speculative_model is not None:
        try:
            speculator = load_speculator_config(args.speculative_model)
            if speculator is not None:
                speculator_parameters = speculator.num_parameters
            else:
                draft_config = load_config(args.speculative_model)
        except (SwitchyardError, OSError, ValueError) as exc:
            parser.error(f"cannot read speculative model {args.speculative_model!r}: {exc}")
    cpu = device.is_cpu
    inputs = PlanInputs(
        config=config,
        model_name=args.model,
        device=device,
        dtype=args.dtype,
        kv_dtype=args.kv_dtype,
        quantization=quantization,
        int4_group_size=int4_group_size,
        max_model_len=args.max_model_len,
        tensor_parallel=args.tensor_parallel_size,
        block_size=args.block_size,
        memory_utilization=args.memory_utilization or default_memory_utilization(not cpu),
        max_num_batched_tokens=args.max_num_batched_tokens or (512 if cpu else 4096),
        max_num_seqs=args.max_num_seqs,
        seq_lens=args.seq_lens,
        batch_sizes=args.batch_sizes,
        context_len=args.context_len,
        draft_config=draft_config,
        speculator_parameters=speculator_parameters,
    )
    try:
        plan = make_plan(inputs)
    except ValueError as exc:
        parser.error(str(exc))
    print(json.dumps(plan.to_dict(), indent=2) if args.json else render(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
