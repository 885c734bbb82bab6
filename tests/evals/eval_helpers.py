"""Helpers of the evals tests: suite files and `switchyard eval` as a user runs it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def write_suite(path: Path, cases: list[dict[str, Any]], header: dict[str, Any] | None = None) -> Path:
    lines = ([json.dumps({"suite": header})] if header else []) + [json.dumps(c) for c in cases]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`switchyard eval ...` in its own process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "switchyard.cli", "eval", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def import_scripted_model() -> tuple[Any, Any, Any]:
    """The agents tests' scripted model (ScriptedModel, call, say); its folder is not a package, and the name
    `agents` belongs to the OpenAI Agents SDK."""
    folder = str(ROOT / "tests" / "agents")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import scripted_model

    return scripted_model.ScriptedModel, scripted_model.call, scripted_model.say


def score_case(case: Any, outcome: Any) -> dict[str, bool]:
    """Every check of a chat case graded on one outcome, by metric name."""
    from switchyard.evals.scorers import ScoringContext, get_scorer

    return {
        c.metric: asyncio.run(get_scorer(c.scorer).score(c.params, outcome, ScoringContext())).passed
        for c in case.checks
    }


def gold_outcome(message: dict[str, Any]) -> Any:
    """A corpus's gold assistant message as the API returns it: text in content, calls in tool_calls."""
    from switchyard.evals.outcome import Outcome, ToolCall

    calls = tuple(
        ToolCall(c["function"]["name"], json.dumps(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    )
    return Outcome(message.get("content") or "", calls)
