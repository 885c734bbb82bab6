"""`switchyard agent demo`: an assistant with tools, approvals on the terminal and a readable trace.

The parser needs nothing beyond the standard library, so a missing `agents` extra is reported as such.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from switchyard.extras import MissingExtraError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard agent", description="Switchyard's agent runtime.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="run the demo assistant (calculator, unit conversion, weather, send_message with approval)",
        description="Start a server on MODEL (or use --base-url) and run the demo assistant on each task, "
        "printing every model reply, tool call and tool result. send_message needs your approval.",
    )
    demo.add_argument("--model", default="switchyard-chat", help="bundled model name or HF folder to serve")
    demo.add_argument("--base-url", default=None, help="use a running OpenAI-compatible server (…/v1)")
    demo.add_argument("--served-model", default=None, help="model name to request (default: --model)")
    demo.add_argument("--task", action="append", default=None, help="a request to run (repeatable)")
    demo.add_argument(
        "--approve",
        choices=("ask", "yes", "no", "console"),
        default="ask",
        help="answer approval requests by asking on the terminal (default), always yes / no, or in the web "
        "console (a page on --console-port lists the runs, with Approve and Reject)",
    )
    demo.add_argument(
        "--console-port",
        type=int,
        default=8090,
        help="with --approve console: the loopback port of the console's page (8090; 0 picks a free one)",
    )
    demo.add_argument(
        "--runs-db",
        type=Path,
        default=None,
        help="with --approve console: the runs' checkpoint file (default: a fresh one under $SWITCHYARD_HOME)",
    )
    demo.add_argument("--max-turns", type=int, default=4, help="model calls per task (4)")
    demo.add_argument("--timeout", type=float, default=120.0, help="seconds per task (120)")
    demo.add_argument(
        "--trace-file", type=Path, default=None, help="also write OpenTelemetry spans as JSON lines"
    )
    demo.add_argument(
        "--spotlight",
        action="store_true",
        help="wrap tool results in random delimiters (off by default: the bundled model was trained on raw "
        "tool JSON; taint-triggered approval stays on either way)",
    )
    demo.add_argument("--device", default="auto", help="device of the started server (cpu, cuda, auto)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from switchyard.agents.demo_run import run_demo
    except MissingExtraError as exc:
        print(f"switchyard agent: error: {exc}", file=sys.stderr)
        return 2
    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())
