"""`switchyard eval run` against a real server on loopback (a tiny random model), as a user runs it: per-case
JSONL, the summary, the reports, errors retried, and a crash mid-run resumed without scoring a case twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from eval_helpers import ROOT, read_jsonl, run_cli, write_suite
from server.harness import RunningServer

from switchyard.evals.summary import RunFile

BOOLEAN = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


def chat_cases(count: int, max_tokens: int = 8) -> list[dict]:
    return [
        {
            "id": f"c{i:03d}",
            "messages": [{"role": "user", "content": f"Tell me about item {i}."}],
            "params": {"max_tokens": max_tokens},
            "checks": [
                {"scorer": "regex", "metric": "short", "pattern": r"^.{0,12}$"},
                {"scorer": "latency", "max_seconds": 60},
            ],
        }
        for i in range(count)
    ]


def served_requests(server: RunningServer) -> float:
    """Requests the server finished, whatever their finish reason (from /metrics)."""
    server.wait_for_free_blocks()
    text = server.http().get("/metrics").text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("switchyard:request_success_total{")
    )


def test_run_writes_records_summary_and_reports(eval_server: RunningServer, tmp_path: Path) -> None:
    cases = chat_cases(6)
    cases.append({"id": "json", "messages": [{"role": "user", "content": "A JSON object please."}],
                  "params": {"max_tokens": 40, "response_format": {"type": "json_schema", "json_schema": {"name": "ok", "schema": BOOLEAN}}},
                  "checks": [{"scorer": "json_valid"}]})  # fmt: skip
    cases.append({"id": "agent", "kind": "agent", "input": "What is 2 + 3?", "tools": ["calculator"],
                  "checks": [{"scorer": "tool_selection", "calls": [{"name": "calculator", "arguments": {}}]}]})  # fmt: skip
    suite = write_suite(tmp_path / "mine.jsonl", cases, {"name": "mine", "thresholds": {"json_valid": 1.0},
                        "agent": str(ROOT / "switchyard/evals/suites/agents/bundled-agent.json")})  # fmt: skip
    out = tmp_path / "run"
    done = run_cli("run", str(suite), "--base-url", f"{eval_server.base_url}/v1", "--model", "tiny",
                   "--output-dir", str(out), "--temperature", "0", "--price-input", "1", "--price-output", "2")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "suite mine: 8 of 8 cases scored" in done.stdout and "thresholds: all met" in done.stdout
    records = {r["id"]: r for r in read_jsonl(out / "cases.jsonl")}
    assert set(records) == {c["id"] for c in cases}
    first = records["c000"]
    assert first["error"] is None and first["output_tokens"] > 0 and first["latency_s"] > 0
    assert first["checks"]["latency"]["passed"] and first["checks"]["latency"]["value"] == first["latency_s"]
    assert first["cost"] == (first["input_tokens"] * 1 + first["output_tokens"] * 2) / 1e6
    assert records["json"]["checks"]["json_valid"]["passed"], records["json"][
        "output"
    ]  # the server's JSON mode
    assert records["agent"]["output"]["status"] in ("completed", "truncated", "max_turns")
    run = RunFile.read(out)
    assert run.summary.metrics["json_valid"].rate == 1.0 and run.summary.scored == 8
    assert run.summary.latency_p50 is not None and run.summary.output_tokens == sum(
        r["output_tokens"] for r in records.values()
    )
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "short" in html
    assert "| short |" in (out / "summary.md").read_text()


def test_a_missed_threshold_fails_the_run(eval_server: RunningServer, tmp_path: Path) -> None:
    cases = [{"id": "a", "messages": [{"role": "user", "content": "hi"}], "params": {"max_tokens": 4},
              "checks": [{"scorer": "exact", "expected": "a reply a random model never writes"}]}]  # fmt: skip
    suite = write_suite(tmp_path / "s.jsonl", cases, {"name": "s", "thresholds": {"exact": 0.5}})
    done = run_cli("run", str(suite), "--base-url", f"{eval_server.base_url}/v1", "--model", "tiny",
                   "--output-dir", str(tmp_path / "run"), "--no-progress")  # fmt: skip
    assert done.returncode == 1 and "thresholds: MISSED" in done.stdout


def test_endpoint_errors_are_recorded_then_retried(eval_server: RunningServer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", chat_cases(3), {"name": "s"})
    out = tmp_path / "run"
    down = run_cli("run", str(suite), "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny",
                   "--output-dir", str(out), "--no-progress")  # fmt: skip
    assert "0 of 3 cases scored, 3 errors" in down.stdout, down.stderr
    assert all("APIConnectionError" in r["error"] for r in read_jsonl(out / "cases.jsonl"))
    back = run_cli("run", str(suite), "--base-url", f"{eval_server.base_url}/v1", "--model", "tiny",
                   "--output-dir", str(out), "--no-progress")  # fmt: skip
    assert back.returncode == 0 and "3 of 3 cases scored; model tiny" in back.stdout, back.stdout
    other = run_cli("run", str(suite), "--base-url", f"{eval_server.base_url}/v1", "--model", "other",
                    "--output-dir", str(out), "--no-progress")  # fmt: skip
    assert other.returncode == 2 and "holds a run with other model" in other.stderr


def test_a_crash_mid_run_resumes_without_rescoring(eval_server: RunningServer, tmp_path: Path) -> None:
    total = 30
    suite = write_suite(tmp_path / "s.jsonl", chat_cases(total, max_tokens=48), {"name": "s"})
    out = tmp_path / "run"
    results = out / "cases.jsonl"
    command = [sys.executable, "-m", "switchyard.cli", "eval", "run", str(suite), "--base-url",
               f"{eval_server.base_url}/v1", "--model", "tiny", "--output-dir", str(out), "--concurrency", "1",
               "--temperature", "0", "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
    while not (results.is_file() and len(results.read_text().splitlines()) >= 4):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    before = results.read_text()
    scored = len(before.splitlines())
    assert scored < total, "the run finished before the crash: make its cases slower"
    requests_before = served_requests(eval_server)
    resumed = run_cli(*command[4:])
    assert resumed.returncode == 0, resumed.stderr
    assert served_requests(eval_server) - requests_before == total - scored  # no scored case was sent again
    after = results.read_text()
    assert after.startswith(before)  # the records from before the crash are kept as they were
    ids = [r["id"] for r in read_jsonl(results)]
    assert sorted(ids) == [f"c{i:03d}" for i in range(total)]  # every case once
    assert f"{total} of {total} cases scored" in resumed.stdout
