"""The shipped suites are what `eval_suites.py` writes, the bundled-gate suite grades exactly as the training
gate does, and `switchyard eval run bundled-gate` passes on a slice against the served bundled model."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from eval_helpers import ROOT, gold_outcome, read_jsonl, run_cli, score_case

from switchyard.evals.outcome import Outcome
from switchyard.evals.suite import SUITES_DIR, ChatCase, load_suite
from switchyard.models.registry import BUNDLED_MODELS, MAIN_MODEL, is_built
from switchyard_training.corpus import generate_corpus, heldout_config
from switchyard_training.eval_suites import write_all
from switchyard_training.quality import GATE_EXAMPLES, evaluate

EXAMPLES = 300
"""The gate's first held-out conversations, graded both ways (the suite holds all 1200)."""


def test_the_shipped_suites_are_what_the_script_writes(tmp_path: Path) -> None:
    write_all(tmp_path)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    shipped = sorted(
        p.relative_to(SUITES_DIR) for p in SUITES_DIR.rglob("*") if p.is_file() and p.name != "README.md"
    )
    assert written == shipped
    for name in written:
        assert (tmp_path / name).read_bytes() == (SUITES_DIR / name).read_bytes(), (
            f"{name} is stale: rerun the script"
        )


def test_the_suite_grades_as_the_training_gate_does() -> None:
    examples = generate_corpus(heldout_config(size=GATE_EXAMPLES, seed=0))[:EXAMPLES]
    cases = {case.id: case for case in load_suite("bundled-gate").cases}
    graded = [(f"gate-{i:04d}-{turn}", example, turn) for i, example in enumerate(examples)
              for turn in sorted({c.turn for c in example.checks})]  # fmt: skip
    assert len(graded) > 400 and all(case_id in cases for case_id, _, _ in graded)
    for case_id, example, turn in graded:
        case = cases[case_id]
        assert isinstance(case, ChatCase) and len(case.messages) == turn
        assert all(score_case(case, gold_outcome(example.messages[turn])).values()), case_id

    parrot = evaluate(lambda messages, tools: messages[-1]["content"], examples)
    counts: dict[str, list[int]] = {}
    for case_id, example, turn in graded:
        for metric, passed in score_case(
            cases[case_id], Outcome(example.messages[turn - 1]["content"])
        ).items():
            counts.setdefault(metric, [0, 0])
            counts[metric][0] += passed
            counts[metric][1] += 1
    assert {m: (r.correct, r.total) for m, r in parrot.metrics.items()} == {
        m: tuple(c) for m, c in counts.items()
    }
    assert not parrot.passed


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[str]:
    """`switchyard serve switchyard-chat` as a user starts it."""
    if not is_built(BUNDLED_MODELS[MAIN_MODEL]):
        pytest.skip("the bundled model's weights are not in this checkout")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable,
        "-m",
        "switchyard.cli",
        "serve",
        MAIN_MODEL,
        "--port",
        str(port),
        "--device",
        "cpu",
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300  # a guard against a hang, not a measurement
    try:
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_the_bundled_model_passes_a_slice_of_its_gate(bundled_server: str, tmp_path: Path) -> None:
    done = run_cli("run", "bundled-gate", "--base-url", bundled_server, "--model", MAIN_MODEL, "--limit", "24",
                   "--output-dir", str(tmp_path / "gate"), "--no-progress")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = read_jsonl(tmp_path / "gate" / "cases.jsonl")
    assert len(records) == 24 and all(r["error"] is None for r in records)
    calls = [c for r in records for c in r["output"]["tool_calls"]]
    assert calls and all(json.loads(c["arguments"]) is not None for c in calls)  # parsed by the server
    assert "thresholds: all met" in done.stdout
