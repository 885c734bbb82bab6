"""`switchyard agent demo` as it runs: start a server (or use one), run the demo assistant on each task, print
every model reply, tool call and tool result, and ask the terminal for approvals."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from switchyard.agents.checkpoint import CheckpointStore
from switchyard.agents.console_host import ConsoleHost
from switchyard.agents.demo import DEMO_CALLER, DemoWorld, demo_agent, demo_tasks
from switchyard.agents.events import (
    ApprovalRequested,
    HandedOff,
    RunEvent,
    RunFinished,
    ToolCalled,
    ToolResult,
)
from switchyard.agents.injection import InjectionPolicy
from switchyard.agents.limits import RunLimits
from switchyard.agents.model import OpenAIModelClient
from switchyard.agents.result import RunResult
from switchyard.agents.runner import Runner
from switchyard.agents.tracing import AgentTracer, TraceConfig
from switchyard.errors import SwitchyardError
from switchyard.home import switchyard_home


def run_demo(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    server: subprocess.Popen[bytes] | None = None
    base_url = args.base_url
    if base_url is None:
        # The server resolves the model (a bundled name or a folder): agents never load models themselves.
        try:
            server, base_url = start_server(args.model, args.device, out)
        except ServerStartError as exc:
            print(f"switchyard agent demo: error: {exc}", file=sys.stderr)
            return 2
    try:
        return asyncio.run(_run_tasks(args, base_url, out))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


class ServerStartError(SwitchyardError):
    """The `switchyard serve` the demo started exited, or did not become healthy in time."""


def start_server(model: str, device: str, out: TextIO) -> tuple[subprocess.Popen[bytes], str]:
    """`switchyard serve MODEL` on a free loopback port; returns once /health answers. ServerStartError when it
    exits first (its own error, e.g. a model that does not resolve, is on stderr above) or stays unhealthy."""
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "switchyard.cli",
        "serve",
        model,
        "--port",
        str(port),
        "--device",
        device,
    ]
    print(f"starting: {' '.join(command[2:])}", file=out, flush=True)
    process = subprocess.Popen(command)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(
                f"`switchyard serve {model}` exited with code {process.returncode} (its error is above)"
            )
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise ServerStartError(f"`switchyard serve {model}` did not become healthy within 300 s")


async def _run_tasks(args: argparse.Namespace, base_url: str, out: TextIO) -> int:
    world = DemoWorld()
    tracer = AgentTracer.from_config(TraceConfig(jsonl_path=args.trace_file) if args.trace_file else None)
    in_console = args.approve == "console"
    store = CheckpointStore(args.runs_db or _fresh_runs_db()) if in_console else None
    runner = Runner(
        limits=RunLimits(max_turns=args.max_turns, timeout=args.timeout),
        policy=InjectionPolicy(spotlight=args.spotlight),
        tracer=tracer,
        store=store,
    )
    agent = demo_agent(OpenAIModelClient(base_url=base_url), args.served_model or args.model, world)
    console = await ConsoleHost.start(runner, args.console_port, out) if in_console else None
    failures = 0
    try:
        for task in args.task or demo_tasks(world):
            print(f"\n> {task}", file=out, flush=True)
            started = time.monotonic()
            stream = runner.run_streamed(agent, task, caller=DEMO_CALLER)
            while True:
                async for event in stream.events():
                    _print_event(event, out)
                result = stream.result
                assert result is not None
                if not result.interrupted:
                    break
                if console is not None:
                    result = await console.wait_for_decisions(result, out)
                    break
                for item in result.pending_approvals:
                    if _decide(args.approve, item.tool, item.arguments, item.reason, out):
                        result.state.approve(item.call_id)
                    else:
                        result.state.reject(item.call_id, "the user declined")
                stream = runner.resume_streamed(result.state)
            failures += not result.completed
            _print_summary(result, time.monotonic() - started, out)
    finally:
        if console is not None:
            await console.stop()
        if store is not None:
            store.close()
    if world.outbox:
        print("\noutbox:", *world.outbox, sep="\n  ", file=out)
    tracer.shutdown()
    return 1 if failures else 0


def _fresh_runs_db() -> Path:
    folder = switchyard_home() / "agent-runs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"demo-{time.strftime('%Y%m%d-%H%M%S')}.db"


def _print_event(event: RunEvent, out: TextIO) -> None:
    if isinstance(event, ToolCalled):
        print(f"  → {event.tool}({json.dumps(event.arguments, ensure_ascii=False)})", file=out, flush=True)
    elif isinstance(event, ToolResult):
        print(f"  ← {event.tool}: {event.result}", file=out, flush=True)
    elif isinstance(event, ApprovalRequested):
        print(f"  ? approval needed: {event.item.reason}", file=out, flush=True)
    elif isinstance(event, HandedOff):
        print(f"  ⇒ handed off from {event.source} to {event.target}", file=out, flush=True)
    elif isinstance(event, RunFinished) and event.result.completed:
        print(f"  assistant: {event.result.final_output}", file=out, flush=True)


def _decide(mode: str, tool: str, arguments: dict[str, object], reason: str, out: TextIO) -> bool:
    question = f"  approve {tool}({json.dumps(arguments, ensure_ascii=False)})? [y/N] "
    if mode != "ask" or not sys.stdin.isatty():
        answer = mode == "yes"
        print(
            f"{question}{'y' if answer else 'n'} (--approve {mode if mode != 'ask' else 'no: stdin is not a terminal'})",
            file=out,
        )
        return answer
    return input(question).strip().lower() in ("y", "yes")


def _print_summary(result: RunResult, seconds: float, out: TextIO) -> None:
    print(
        f"  [{result.status.value}{': ' + result.status_detail if result.status_detail else ''}] "
        f"turns={result.turns} tokens={result.usage.input_tokens}+{result.usage.output_tokens} "
        f"time={seconds:.1f}s",
        file=out,
        flush=True,
    )
    if not result.completed and result.partial_output:
        print(f"  partial output: {result.partial_output}", file=out)
