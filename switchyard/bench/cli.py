"""`switchyard bench serve` (load against an OpenAI-compatible endpoint) and `switchyard bench offline`."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from switchyard.bench.workloads import CHAT_ONLY, WORKLOADS


def _number(kind: type, minimum: float, *, inclusive: bool = True, allow_inf: bool = False):  # type: ignore[no-untyped-def]
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if isinstance(value, float) and math.isinf(value) and allow_inf and value > 0:
            return value
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            bound = f">= {minimum}" if inclusive else f"> {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text!r}")
        return value

    return parse


def _slo(text: str):  # type: ignore[no-untyped-def]
    from switchyard.bench.slo import parse_slo

    try:
        return parse_slo(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def add_serve_parser(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="load-test an OpenAI-compatible endpoint",
        description="Stream requests to an OpenAI-compatible endpoint (Switchyard, vLLM, llama.cpp, a hosted "
        "API) on a load shape; record every request (TTFT, inter-token latencies, E2E, tokens, errors) to JSONL "
        "and report latency percentiles, throughput and goodput under an SLO. --find-max-rate searches for the "
        "highest request rate meeting the SLO.",
    )
    target = serve.add_argument_group("endpoint")
    target.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="the API root, /v1 included")
    target.add_argument(
        "--model", default=None, help="model name to send (default: the first /v1/models lists)"
    )
    target.add_argument(
        "--api",
        choices=("completions", "chat"),
        default=None,
        help="default: chat for chat/tenants/tools, else completions",
    )
    target.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="default: $OPENAI_API_KEY"
    )
    target.add_argument(
        "--ignore-eos",
        action="store_true",
        help="send ignore_eos (vLLM/Switchyard) so outputs reach max_tokens",
    )
    target.add_argument("--temperature", type=_number(float, 0.0), default=0.0)
    target.add_argument("--extra-body", type=_json_object, default={}, help="JSON merged into every request")
    target.add_argument(
        "--timeout", type=_number(float, 0.0, inclusive=False), default=600.0, help="per request"
    )

    workload = serve.add_argument_group("workload")
    workload.add_argument("--workload", choices=WORKLOADS, default="random")
    workload.add_argument("--num-prompts", type=_number(int, 1), default=100, help="sessions to send")
    workload.add_argument(
        "--duration",
        type=_number(float, 0.0, inclusive=False),
        default=None,
        help="send rate × duration sessions instead of --num-prompts (needs a finite rate); at low rates "
        "that is few requests, so a p99 over it says little: prefer --num-prompts there",
    )
    workload.add_argument(
        "--input-len", type=_number(int, 1), default=256, help="prompt tokens (per chat turn)"
    )
    workload.add_argument("--output-len", type=_number(int, 1), default=128, help="max_tokens per request")
    workload.add_argument(
        "--range-ratio", type=_number(float, 0.0), default=0.0, help="lengths uniform in len × [1 − r, 1 + r]"
    )
    workload.add_argument(
        "--prefix-len",
        type=_number(int, 1),
        default=256,
        help="prefix workload: shared tokens; tenants workload: each tenant's system prompt",
    )
    workload.add_argument(
        "--num-prefixes",
        type=_number(int, 1),
        default=4,
        help="prefix workload: families; tenants workload: tenants",
    )
    workload.add_argument(
        "--turns", type=_number(int, 1), default=3, help="chat and tenants workloads: turns per session"
    )
    workload.add_argument("--dataset", type=Path, default=None, help="jsonl workload: one request per line")
    workload.add_argument(
        "--tokenizer", type=Path, default=None, help="tokenizer.json or model folder for exact prompt lengths"
    )
    workload.add_argument("--warmup", type=_number(int, 0), default=1, help="untimed requests sent first")

    load = serve.add_argument_group("load shape")
    load.add_argument(
        "--request-rate",
        type=_number(float, 0.0, inclusive=False, allow_inf=True),
        default=math.inf,
        help="mean arrivals per second (default inf: all at once); the start of --find-max-rate",
    )
    load.add_argument(
        "--burstiness",
        type=_number(float, 0.0, inclusive=False),
        default=1.0,
        help="gamma shape: 1 = Poisson",
    )
    load.add_argument(
        "--max-concurrency", type=_number(int, 1), default=None, help="requests in flight at most"
    )
    load.add_argument("--ramp-up", type=_number(float, 0.0), default=0.0, help="seconds of linear rate ramp")
    load.add_argument("--seed", type=int, default=0)

    slo = serve.add_argument_group("SLO and search")
    slo.add_argument(
        "--slo", type=_slo, default=None, help="e.g. ttft_p99=500ms,tpot_p99=50ms (seconds if bare)"
    )
    slo.add_argument(
        "--find-max-rate", action="store_true", help="binary-search the highest rate meeting --slo"
    )
    slo.add_argument("--search-tolerance", type=_number(float, 0.0, inclusive=False), default=0.1)
    slo.add_argument("--max-probes", type=_number(int, 1), default=10)
    slo.add_argument("--min-rate", type=_number(float, 0.0, inclusive=False), default=0.05)

    out = serve.add_argument_group("output")
    out.add_argument("--output-dir", type=Path, default=None, help="default: bench-results/<timestamp>")
    out.add_argument("--no-report", action="store_true", help="skip report.md / report.png")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    serve.set_defaults(func=cmd_serve, parser=serve)


def add_offline_parser(commands: Any) -> None:
    from switchyard.engine_args import add_engine_args

    offline = commands.add_parser(
        "offline",
        help="offline throughput of the engine, optionally against transformers",
        description="Generate from random token-id prompts with Switchyard's engine (all at once, greedy, "
        "exactly --output-len tokens each); with --baseline hf, run the same prompts through transformers' "
        "generate in the same process and print the ratio.",
    )
    offline.add_argument("--model", required=True, help="HF model folder or bundled model name")
    offline.add_argument("--num-prompts", type=_number(int, 1), default=64)
    offline.add_argument(
        "--input-len", type=_number(int, 1), default=256, help="prompt tokens after the prefix"
    )
    offline.add_argument(
        "--output-len", type=_number(int, 1), default=128, help="tokens generated per prompt"
    )
    offline.add_argument(
        "--prefix-len",
        type=_number(int, 0),
        default=0,
        help="tokens of a prefix every prompt shares (default 0)",
    )
    offline.add_argument("--baseline", choices=("none", "hf"), default="none")
    offline.add_argument(
        "--hf-batch-size", type=_number(int, 1), default=16, help="transformers' static batch"
    )
    offline.add_argument(
        "--decode-len", type=_number(int, 0), default=0, help="also time batch-1 decode of this many tokens"
    )
    offline.add_argument(
        "--repeats",
        type=_number(int, 1),
        default=1,
        help="alternate the two sides N times, keep each one's best",
    )
    offline.add_argument(
        "--threads",
        type=_number(int, 1),
        default=None,
        help="torch intra-op threads (default: torch's choice)",
    )
    offline.add_argument("--json", type=Path, default=None, help="also write the results here")
    add_engine_args(offline)
    offline.set_defaults(func=cmd_offline, parser=offline)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard bench", description="Serving and engine benchmarks.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(commands)
    add_offline_parser(commands)
    return parser


# ----------------------------------------------------------------------------------------------- serve
def _normalise_base_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") or "/v1/" in url else f"{url}/v1"


def cmd_serve(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    from switchyard.bench.workloads import WorkloadError, WorkloadOptions, build_sessions

    api = args.api or ("chat" if args.workload in CHAT_ONLY else "completions")
    if args.find_max_rate and args.slo is None:
        parser.error("--find-max-rate needs --slo (the target the rate must meet)")
    if args.duration is not None and math.isinf(args.request_rate) and not args.find_max_rate:
        parser.error("--duration needs a finite --request-rate")
    if args.dataset is not None and not args.dataset.is_file():
        parser.error(f"--dataset file not found: {args.dataset}")
    if args.workload == "jsonl" and args.dataset is None:
        parser.error("the jsonl workload needs --dataset FILE")
    if args.tokenizer is not None and not args.tokenizer.exists():
        parser.error(f"--tokenizer not found: {args.tokenizer}")
    options = WorkloadOptions(
        name=args.workload,
        api=api,
        input_len=args.input_len,
        output_len=args.output_len,
        range_ratio=args.range_ratio,
        prefix_len=args.prefix_len,
        num_prefixes=args.num_prefixes,
        turns=args.turns,
        dataset=args.dataset,
        tokenizer=args.tokenizer,
        seed=args.seed,
    )
    try:
        build_sessions(replace(options, seed=options.seed + 1), 1)  # the options are sound before any traffic
    except WorkloadError as exc:
        parser.error(str(exc))
    output_dir = args.output_dir or Path("bench-results") / time.strftime("%Y%m%d-%H%M%S")
    from switchyard.bench.client import EndpointError
    from switchyard.bench.runner import RunInterrupted

    try:
        return asyncio.run(_serve(args, api, options, output_dir))
    except EndpointError as exc:
        print(f"switchyard bench: error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, RunInterrupted):
        # Interrupted before a measured run started (connecting, warm-up): nothing worth summarising.
        print("switchyard bench: interrupted", file=sys.stderr)
        return INTERRUPTED


def _token_counter(path: Path) -> Any:
    from switchyard.bench.workloads import load_tokenizer

    tokenizer = load_tokenizer(path)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


INTERRUPTED = 130
"""Exit status after Ctrl-C, as a shell reports a SIGINT'd command."""
NOTHING_MEASURED = 1
"""Exit status when every request of a run failed: a script gating on the benchmark must not read it as a pass."""


@dataclass
class _Session:
    """What one `bench serve` invocation works with once the endpoint answered."""

    args: argparse.Namespace
    client: Any
    target: Any
    options: Any
    shape: Any
    output_dir: Path
    context: list[str]
    count_tokens: Any = None
    """Tokens in an output text (from --tokenizer), for servers that send no usage."""

    def count_at(self, rate: float) -> int:
        """Sessions in one run: rate × --duration, or --num-prompts."""
        return max(1, math.ceil(rate * self.args.duration)) if self.args.duration else self.args.num_prompts


async def _serve(args: argparse.Namespace, api: str, options: Any, output_dir: Path) -> int:
    from switchyard.bench.client import Target, resolve_model
    from switchyard.bench.load import LoadShape
    from switchyard.bench.runner import http_client, run_load
    from switchyard.bench.workloads import build_sessions

    base_url = _normalise_base_url(args.base_url)
    shape = LoadShape(args.request_rate, args.burstiness, args.max_concurrency, args.ramp_up, args.seed)
    async with http_client(shape, args.timeout) as client:
        model = await resolve_model(client, base_url, args.api_key, args.model)
        output_dir.mkdir(parents=True, exist_ok=True)
        target = Target(
            base_url, model, api, args.api_key, args.ignore_eos, args.temperature, args.extra_body
        )
        command = shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "serve ..."
        context = [
            f"command: `switchyard bench {command}`",
            f"endpoint: {base_url} ({api} API), model `{model}`",
            f"workload: {options.name}, input {options.input_len} / output {options.output_len} tokens"
            + (", ignore_eos" if args.ignore_eos else ""),
        ]
        if args.warmup:
            warm = build_sessions(replace(options, seed=options.seed + 1), args.warmup)
            await run_load(client, target, warm, LoadShape(max_concurrency=1), progress=False)
        count_tokens = _token_counter(args.tokenizer) if args.tokenizer else None
        session = _Session(args, client, target, options, shape, output_dir, context, count_tokens)
        return await (_search(session) if args.find_max_rate else _run_once(session))


async def _run_once(session: _Session) -> int:
    """One run, summarised; Ctrl-C keeps what was recorded and summarises the requests that finished."""
    from switchyard.bench.client import CANCELLED
    from switchyard.bench.report import write_report
    from switchyard.bench.runner import RunInterrupted, run_load
    from switchyard.bench.summary import format_summary, summarize
    from switchyard.bench.workloads import build_sessions

    args, shape, out = session.args, session.shape, session.output_dir
    sessions = build_sessions(session.options, session.count_at(shape.request_rate))
    interrupted = False
    try:
        run = await run_load(
            session.client,
            session.target,
            sessions,
            shape,
            jsonl=out / "requests.jsonl",
            progress=not args.quiet,
            count_tokens=session.count_tokens,
        )
    except RunInterrupted as stop:
        run, interrupted = stop.run, True
    # A request cut off by Ctrl-C says nothing about the server: kept in the JSONL, left out of the numbers.
    finished = [r for r in run.results if r.error != CANCELLED]
    context = session.context
    if interrupted:
        note = (
            f"interrupted: the summary covers the {len(finished)} requests that finished; "
            f"{len(run.results) - len(finished)} in flight were cancelled (error `{CANCELLED}` in requests.jsonl) "
            f"and {sum(len(s.turns) for s in sessions) - len(run.results)} were never sent"
        )
        print(note)
        context = [*context, note]
    summary = summarize(
        finished,
        run.duration,
        request_rate=shape.request_rate,
        max_concurrency=shape.max_concurrency,
        slo=args.slo,
    )
    (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=2))
    print(format_summary(summary))
    if not args.no_report:
        path = write_report(
            out, title="switchyard bench serve", context=context, summary=summary, results=finished
        )
        print(f"report: {path}")
    print(f"per-request results: {out / 'requests.jsonl'}")
    if interrupted:
        return INTERRUPTED
    if finished and summary.completed == 0:
        print(f"switchyard bench: error: all {summary.failed} requests failed", file=sys.stderr)
        return NOTHING_MEASURED
    return 0


async def _search(session: _Session) -> int:
    """--find-max-rate: every probe a full run of its own (JSONL per probe), then the trace and a report."""
    from switchyard.bench.client import RequestResult
    from switchyard.bench.report import write_report
    from switchyard.bench.runner import RunInterrupted, run_load
    from switchyard.bench.search import Probe, find_max_rate
    from switchyard.bench.summary import format_summary, summarize
    from switchyard.bench.workloads import build_sessions

    args, shape, out = session.args, session.shape, session.output_dir
    runs: dict[float, list[RequestResult]] = {}

    async def probe(rate: float) -> Probe:
        number = len(runs) + 1
        run = await run_load(
            session.client,
            session.target,
            # Fresh prompts per probe: a repeat of an earlier probe's prompts would hit the prefix cache.
            build_sessions(
                replace(session.options, seed=session.options.seed + 1000 * number), session.count_at(rate)
            ),
            replace(shape, request_rate=rate),
            jsonl=out / f"probe-{number:02d}-rate-{rate:.4g}.jsonl",
            progress=not args.quiet,
            description=f"probe {number} @ {rate:.3g} req/s",
            count_tokens=session.count_tokens,
        )
        summary = summarize(
            run.results, run.duration, request_rate=rate, max_concurrency=shape.max_concurrency, slo=args.slo
        )
        runs[rate] = run.results
        values = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in (summary.slo_values or {}).items())
        verdict = "met" if summary.slo_met else "missed"
        print(
            f"probe {number}: rate {rate:.4g} req/s -> {verdict} ({values}; {summary.failed} failed)",
            flush=True,
        )
        return Probe(rate, bool(summary.slo_met), summary)

    start_rate = 1.0 if math.isinf(args.request_rate) else args.request_rate
    try:
        search = await find_max_rate(
            probe,
            start_rate=start_rate,
            tolerance=args.search_tolerance,
            max_probes=args.max_probes,
            min_rate=args.min_rate,
        )
    except RunInterrupted:
        print(f"interrupted during probe {len(runs) + 1}: no max rate; each probe's requests are in {out}")
        return INTERRUPTED
    trace = {
        "slo": args.slo.describe(),
        "max_rate": search.max_rate,
        "min_failing_rate": search.min_failing_rate,
        "converged": search.converged,
        "probes": [
            {"rate": p.rate, "meets": p.meets, "summary": p.summary.to_json() if p.summary else None}
            for p in search.probes
        ],
    }
    (out / "search.json").write_text(json.dumps(trace, indent=2))
    if search.max_rate is None:
        print(f"no rate down to {args.min_rate:g} req/s met the SLO ({args.slo.describe()})")
    else:
        failing = f"; lowest failing {search.min_failing_rate:.4g}" if search.min_failing_rate else ""
        converged = "" if search.converged else " (not converged)"
        print(
            f"max rate meeting the SLO ({args.slo.describe()}): {search.max_rate:.4g} req/s{failing}{converged}"
        )
    best = next((p for p in search.probes if p.rate == search.max_rate), search.probes[-1])
    if best.summary is not None:
        print(format_summary(best.summary))
        (out / "summary.json").write_text(json.dumps(best.summary.to_json(), indent=2))
        if not args.no_report:
            path = write_report(
                out,
                title="switchyard bench serve --find-max-rate",
                context=session.context,
                summary=best.summary,
                results=runs[best.rate],
                search=search,
            )
            print(f"report: {path}")
    print(f"search trace: {out / 'search.json'}")
    return 0


# --------------------------------------------------------------------------------------------- offline
def cmd_offline(args: argparse.Namespace) -> int:
    from switchyard.bench.offline import run_command

    return run_command(args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from switchyard.errors import SwitchyardError

    try:
        return int(args.func(args) or 0)
    except (SwitchyardError, ValueError) as exc:
        print(f"switchyard bench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
