"""`switchyard eval`: run a suite against an endpoint, compare two runs, A/B two endpoints, list the suites.

switchyard eval run SUITE --base-url URL --model M [--agent FILE] [--baseline RUN]
switchyard eval compare BASE NEW
switchyard eval ab SUITE --base-url-a URL --model-a M --base-url-b URL --model-b M
switchyard eval list
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from switchyard.errors import SwitchyardError
from switchyard.extras import MissingExtraError

TOLERANCE_ALIASES = {"latency": "latency_s", "tokens": "output_tokens", "cost": "cost"}


def _tolerance(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    name = TOLERANCE_ALIASES.get(name, name)
    try:
        fraction = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MEASURE=FRACTION (latency=0.2), got {text!r}") from None
    if name not in TOLERANCE_ALIASES.values() or fraction < 0:
        raise argparse.ArgumentTypeError(f"expected latency, tokens or cost = a fraction >= 0, got {text!r}")
    return name, fraction


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _add_endpoint(parser: argparse.ArgumentParser, suffix: str = "", required: bool = True) -> None:
    flag = f"-{suffix}" if suffix else ""
    side = f" of side {suffix.upper()}" if suffix else ""
    parser.add_argument(
        f"--base-url{flag}",
        required=required and not suffix.endswith("b"),
        help=f"OpenAI-compatible API root{side}, /v1 included (e.g. http://127.0.0.1:8000/v1)",
    )
    parser.add_argument(
        f"--model{flag}", required=required and not suffix.endswith("b"), help=f"model name to send{side}"
    )


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "suite", help="a shipped suite's name (see `switchyard eval list`) or a suite JSONL file"
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where the per-case JSONL, run.json and the reports go (default: "
        "eval-runs/SUITE-MODEL); a rerun into the same folder resumes",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="discard the folder's earlier results and start over"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY", "unused"),
        help="API key of the endpoint (default: $OPENAI_API_KEY)",
    )
    parser.add_argument("--concurrency", type=_positive_int, default=8, help="cases in flight at once (8)")
    parser.add_argument(
        "--limit", type=_positive_int, default=None, help="run only the suite's first N cases"
    )
    parser.add_argument("--temperature", type=float, default=None, help="override every case's temperature")
    parser.add_argument(
        "--max-tokens", type=_positive_int, default=None, help="override every case's max_tokens"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="sampling seed of the run (each case gets its own from it): reruns at temperature > 0 "
        "repeat, and two seeds give two independent samples",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one request may take (600)")
    parser.add_argument(
        "--agent", type=Path, default=None, help="agent config (JSON) for agent cases, instead of the suite's"
    )
    parser.add_argument(
        "--rag-db",
        type=Path,
        default=None,
        help="an existing RAG store holding the cases' collections (default: the suite's own "
        "collections, ingested into the output folder)",
    )
    parser.add_argument(
        "--judge-base-url", default=None, help="endpoint of the judge model (default: --base-url)"
    )
    parser.add_argument(
        "--judge-model",
        default=None,
        help="judge model for the judge scorer (and the grounding check's borderline claims)",
    )
    parser.add_argument(
        "--judge-api-key", default=None, help="API key of the judge endpoint (default: --api-key)"
    )
    parser.add_argument("--price-input", type=float, default=0.0, help="USD per million input tokens (0)")
    parser.add_argument("--price-output", type=float, default=0.0, help="USD per million output tokens (0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_decision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="family-wise significance level of the regression tests (0.05, Holm-corrected)",
    )
    parser.add_argument(
        "--tolerate",
        type=_tolerance,
        action="append",
        default=[],
        metavar="MEASURE=FRACTION",
        help="also gate latency, tokens or cost: a significant increase beyond this fraction "
        "(latency=0.2) is a regression; without it they are reported only",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard eval",
        description="Evaluate a model or an agent behind any OpenAI-compatible endpoint on suites of cases: "
        "pass rates with confidence intervals, tool accuracy, latency, tokens and cost; significance tests "
        "between two runs. Reports: HTML with plots, and Markdown for CI.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run",
        help="run a suite against an endpoint",
        description="Run every case of SUITE against the endpoint, scoring each as it finishes into "
        "OUTPUT/cases.jsonl (a crashed or interrupted run resumes where it stopped when rerun), then write "
        "OUTPUT/run.json, report.html and summary.md. Exits 1 when a metric misses the suite's threshold or, "
        "with --baseline, regresses significantly.",
    )
    _add_common(run)
    _add_endpoint(run)
    run.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a earlier run (its folder or run.json) to compare against: a significant "
        "regression fails the run",
    )
    _add_decision(run)

    compare = commands.add_parser(
        "compare",
        help="compare two runs of one suite (exit 1 on a significant regression)",
        description="Pair the two runs' cases and test each metric: exact McNemar for pass/fail, paired "
        "bootstrap for means; Holm-corrected. Writes compare.html and compare.md (default: beside NEW).",
    )
    compare.add_argument("base", type=Path, help="the baseline run: its folder or run.json")
    compare.add_argument("new", type=Path, help="the new run: its folder or run.json")
    compare.add_argument(
        "--output-dir", type=Path, default=None, help="where the reports go (default: NEW's folder)"
    )
    _add_decision(compare)

    ab = commands.add_parser(
        "ab",
        help="A/B two endpoints or configs on the same cases, interleaved",
        description="Run SUITE on endpoint A and endpoint B (B defaults to A's URL or model, so one flag can "
        "differ), case by case interleaved on one worker pool, then compare B against A. Exits 1 when B "
        "regresses significantly.",
    )
    _add_common(ab)
    _add_endpoint(ab, "a")
    _add_endpoint(ab, "b")
    ab.add_argument("--agent-b", type=Path, default=None, help="agent config of side B (default: --agent)")
    ab.add_argument("--label-a", default="A", help="name of side A in the report (A)")
    ab.add_argument("--label-b", default="B", help="name of side B in the report (B)")
    _add_decision(ab)

    online = commands.add_parser(
        "online",
        help="grade the answers the fleet gateway logged (online evaluation) with a judge model",
        description="Score every exchange in the gateway's online-eval log (--eval-sample) that this judge has "
        "not graded yet, primary and shadow answers alike, with the judge scorer; the verdicts go back into "
        "the log. --every repeats it (or run it from cron).",
    )
    online.add_argument(
        "--log", type=Path, default=None, help="the log (default $SWITCHYARD_HOME/online-eval.db)"
    )
    online.add_argument(
        "--judge-base-url", required=True, help="the judge's OpenAI-compatible URL (with /v1)"
    )
    online.add_argument("--judge-model", required=True, help="the judge model")
    online.add_argument("--judge-api-key", default="unused", help="the judge endpoint's key")
    online.add_argument("--rubric", default=None, help="what a passing answer does (a general default)")
    online.add_argument("--since", default=None, help="only exchanges logged since: unix seconds or ISO 8601")
    online.add_argument(
        "--every", default=None, help="repeat every DURATION (30s, 10m, 1h) until interrupted"
    )
    online.add_argument("--timeout", type=float, default=120.0, help="seconds per judge request (120)")

    quant = commands.add_parser(
        "quant",
        help="quality gate of a quantized model against the unquantized one (perplexity, agreement, tasks)",
        description="Serve MODEL and its quantized form side by side and compare them: perplexity of held-out "
        "text, greedy-token agreement, and a suite's task accuracy (A/B, paired). Prints a verdict against the "
        "rollback thresholds, records it where `switchyard serve` looks (a quantized model without a passing "
        "verdict is served with a warning), and exits 1 when it fails.",
    )
    quant.add_argument("model", help="the unquantized model: bundled name or folder")
    side = quant.add_mutually_exclusive_group(required=True)
    side.add_argument("--quantization", choices=("int8", "w8a8", "int4"), help="quantize MODEL at load")
    side.add_argument(
        "--candidate", default=None, help="a quantized checkpoint folder (`switchyard quantize`)"
    )
    quant.add_argument("--suite", default="bundled-gate", help="the task suite (bundled-gate)")
    quant.add_argument("--limit", type=_positive_int, default=400, help="suite cases used (400)")
    held_out = quant.add_mutually_exclusive_group()
    held_out.add_argument(
        "--text", type=Path, default=None, help="held-out text for perplexity, passages split by blank lines"
    )
    held_out.add_argument(
        "--conversations",
        type=Path,
        default=None,
        help="held-out conversations for perplexity (JSONL of messages and tools, rendered by the chat "
        "template; default: the suite's conversations)",
    )
    quant.add_argument("--concurrency", type=_positive_int, default=8, help="requests in flight (8)")
    quant.add_argument(
        "--max-perplexity-increase", type=float, default=0.03, help="rollback above this relative rise (0.03)"
    )
    quant.add_argument(
        "--max-success-drop", type=float, default=0.01, help="rollback above this absolute drop (0.01)"
    )
    quant.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="a `switchyard serve` flag for both sides (repeat; e.g. --serve-arg=--dtype=bfloat16)",
    )
    quant.add_argument("--output-dir", type=Path, default=None, help="per-case results and gate.json")
    quant.add_argument("--no-progress", action="store_true", help="no progress bar")

    commands.add_parser(
        "list",
        help="list the shipped suites and the scorers",
        description="The suites that ship with Switchyard and every built-in scorer.",
    )
    return parser


def _default_output(suite: str, model: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{suite}-{model}").strip("-")
    return Path("eval-runs") / safe


def _scoring(args: argparse.Namespace, base_url: str) -> Any:
    from switchyard.evals.scorers import JudgeEndpoint, ScoringContext

    if args.judge_model is None:
        return ScoringContext()
    import openai

    client = openai.AsyncOpenAI(
        base_url=args.judge_base_url or base_url,
        api_key=args.judge_api_key or args.api_key,
        timeout=args.timeout,
        max_retries=2,
    )
    return ScoringContext(judge=JudgeEndpoint(client, args.judge_model))


def _settings(args: argparse.Namespace, base_url: str, model: str, agent: Path | None) -> Any:
    from switchyard.evals.endpoint import Endpoint, Prices
    from switchyard.evals.runner import RunSettings

    overrides: dict[str, Any] = {}
    if args.temperature is not None:
        overrides["temperature"] = args.temperature
    if args.max_tokens is not None:
        overrides["max_tokens"] = args.max_tokens
    return RunSettings(
        endpoint=Endpoint(base_url, model, args.api_key, args.timeout),
        concurrency=args.concurrency,
        overrides=overrides,
        seed=args.seed,
        prices=Prices(args.price_input, args.price_output),
        agent_config=agent,
        rag_db=args.rag_db,
    )


def _load(args: argparse.Namespace) -> Any:
    from switchyard.evals.suite import load_suite

    suite = load_suite(args.suite)
    if args.limit is not None:
        suite = replace(suite, cases=suite.cases[: args.limit])
    return suite


def _write_run(output_dir: Path, suite: Any, results: dict[str, Any], settings: Any) -> Any:
    """run.json, summary.md and report.html of a finished run; returns its RunFile."""
    from switchyard.evals.report import run_html, run_markdown, write_text
    from switchyard.evals.summary import run_file, summarize

    recorded = {
        "temperature": settings.overrides.get("temperature"),
        "max_tokens": settings.overrides.get("max_tokens"),
        "seed": settings.seed,
        "concurrency": settings.concurrency,
    }
    summary = summarize(suite, results, settings.endpoint.model, settings.endpoint.base_url, recorded)
    run = run_file(suite, results, summary)
    write_text(output_dir / "run.json", run.to_json() + "\n")
    write_text(output_dir / "summary.md", run_markdown(run))
    write_text(output_dir / "report.html", run_html(run, results))
    return run


def _write_comparison(
    output_dir: Path, comparison: Any, base: Any, new: Any, labels: tuple[str, str]
) -> None:
    from switchyard.evals.report import comparison_html, comparison_markdown, write_text

    write_text(output_dir / "comparison.json", json.dumps(asdict(comparison), indent=1) + "\n")
    write_text(output_dir / "compare.md", comparison_markdown(comparison))
    write_text(output_dir / "compare.html", comparison_html(comparison, base, new, labels))


def cmd_run(args: argparse.Namespace) -> int:
    from switchyard.evals.compare import compare_runs, format_comparison
    from switchyard.evals.runner import run_suite
    from switchyard.evals.summary import RunFile, format_summary

    suite = _load(args)
    settings = _settings(args, args.base_url, args.model, args.agent)
    output = args.output_dir or _default_output(suite.name, args.model)
    baseline = RunFile.read(args.baseline) if args.baseline is not None else None
    results = asyncio.run(
        run_suite(
            suite,
            settings,
            output,
            _scoring(args, args.base_url),
            fresh=args.fresh,
            progress=not args.no_progress,
        )
    )
    run = _write_run(output, suite, results, settings)
    print(format_summary(run.summary))
    print(f"results: {output / 'cases.jsonl'}; report: {output / 'report.html'}")
    failed = not run.summary.passed
    if baseline is not None:
        comparison = compare_runs(baseline, run, args.alpha, dict(args.tolerate))
        _write_comparison(output, comparison, baseline, run, ("baseline", "this run"))
        print(format_comparison(comparison))
        failed = failed or bool(comparison.regressions)
    return 1 if failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from switchyard.evals.compare import compare_runs, format_comparison
    from switchyard.evals.summary import RunFile

    base, new = RunFile.read(args.base), RunFile.read(args.new)
    comparison = compare_runs(base, new, args.alpha, dict(args.tolerate))
    output = args.output_dir or (args.new if args.new.is_dir() else args.new.parent)
    _write_comparison(output, comparison, base, new, ("base", "new"))
    print(format_comparison(comparison))
    print(f"report: {output / 'compare.html'}")
    return 1 if comparison.regressions else 0


def cmd_ab(args: argparse.Namespace) -> int:
    from switchyard.evals.ab import run_ab
    from switchyard.evals.compare import compare_runs, format_comparison
    from switchyard.evals.summary import format_summary

    suite = _load(args)
    url_b, model_b = args.base_url_b or args.base_url_a, args.model_b or args.model_a
    settings = {
        "a": _settings(args, args.base_url_a, args.model_a, args.agent),
        "b": _settings(args, url_b, model_b, args.agent_b or args.agent),
    }
    output = args.output_dir or _default_output(suite.name, f"{args.label_a}-vs-{args.label_b}")
    results = asyncio.run(
        run_ab(
            suite,
            settings,
            output,
            _scoring(args, args.base_url_a),
            concurrency=args.concurrency,
            fresh=args.fresh,
            progress=not args.no_progress,
        )
    )
    run_a = _write_run(output / "a", suite, results.a, settings["a"])
    run_b = _write_run(output / "b", suite, results.b, settings["b"])
    comparison = compare_runs(run_a, run_b, args.alpha, dict(args.tolerate))
    comparison = replace(
        comparison,
        base_label=f"{args.label_a}: {run_a.summary.model}",
        new_label=f"{args.label_b}: {run_b.summary.model}",
    )
    _write_comparison(output, comparison, run_a, run_b, (args.label_a, args.label_b))
    print(f"[{args.label_a}] " + format_summary(run_a.summary))
    print(f"[{args.label_b}] " + format_summary(run_b.summary))
    print(format_comparison(comparison))
    print(f"report: {output / 'compare.html'}")
    return 1 if comparison.regressions else 0


def cmd_list(args: argparse.Namespace) -> int:
    from switchyard.evals.scorers import SCORERS
    from switchyard.evals.suite import load_suite, shipped_suites

    print("suites:")
    for name, path in shipped_suites().items():
        suite = load_suite(path)
        kinds = sorted({str(case.kind) for case in suite.cases})
        thresholds = ", ".join(f"{m} >= {t:.2f}" for m, t in suite.thresholds.items()) or "none"
        print(
            f"  {name}: {len(suite.cases)} {'/'.join(kinds)} cases; metrics {', '.join(suite.metrics())}; "
            f"thresholds {thresholds}"
        )
        if suite.description:
            print(f"      {suite.description}")
    print("scorers:")
    for scorer in SCORERS.values():
        print(f"  {scorer.name}: {scorer.description}")
    return 0


def cmd_online(args: argparse.Namespace) -> int:
    import openai

    from switchyard.evals.online import DEFAULT_RUBRIC, judge_every, judge_log
    from switchyard.evals.scorers import JudgeEndpoint, ScoringContext
    from switchyard.fleet.online_eval.config import default_eval_log

    client = openai.AsyncOpenAI(
        base_url=args.judge_base_url, api_key=args.judge_api_key, timeout=args.timeout, max_retries=2
    )
    context = ScoringContext(judge=JudgeEndpoint(client, args.judge_model))
    log = args.log or default_eval_log()
    rubric = args.rubric or DEFAULT_RUBRIC
    since = _since(args.since)
    if args.every is not None:
        asyncio.run(judge_every(log, context, args.judge_model, rubric, _seconds(args.every), since))
        return 0
    run = asyncio.run(judge_log(log, context, args.judge_model, rubric, since))
    print(f"switchyard eval online: graded {run.graded}, passed {run.passed} ({log})")
    return 0


def cmd_quant(args: argparse.Namespace) -> int:
    from switchyard.evals.quant_gate import GateRequest, GateThresholds, format_result, run_gate

    texts: tuple[str, ...] = ()
    conversations: tuple[dict[str, Any], ...] = ()
    if args.text is not None:
        texts = tuple(part for part in args.text.read_text().split("\n\n") if part.strip())
    if args.conversations is not None:
        lines = args.conversations.read_text().splitlines()
        conversations = tuple(json.loads(line) for line in lines if line.strip())
    request = GateRequest(
        model=args.model,
        quantization=args.quantization,
        candidate=args.candidate,
        suite=args.suite,
        limit=args.limit,
        texts=texts,
        conversations=conversations,
        serve_args=tuple(args.serve_arg),
        concurrency=args.concurrency,
        thresholds=GateThresholds(args.max_perplexity_increase, args.max_success_drop),
    )
    label = args.quantization or Path(args.candidate).name
    output = args.output_dir or _default_output("quant", f"{args.model}-{label}")
    result = run_gate(request, output, progress=not args.no_progress)
    print(format_result(result))
    print(f"results: {output / 'gate.json'}")
    return 0 if result.passed else 1


def _since(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        moment = datetime.fromisoformat(value)
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _seconds(duration: str) -> float:
    """`90`, `30s`, `10m`, `1h` in seconds."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    value = float(duration[:-1]) * units[duration[-1]] if duration[-1:] in units else float(duration)
    if value <= 0:
        raise ValueError(f"--every must be a positive duration, not {duration!r}")
    return value


COMMANDS = {
    "online": cmd_online,
    "run": cmd_run,
    "compare": cmd_compare,
    "ab": cmd_ab,
    "quant": cmd_quant,
    "list": cmd_list,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(
            "\nswitchyard eval: interrupted; every finished case is saved: rerun the same command to resume",
            file=sys.stderr,
        )
        return 130
    except (SwitchyardError, MissingExtraError, ValueError, OSError) as exc:
        print(f"switchyard eval: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
