"""`switchyard bench serve` and `bench offline` against the real engine: a server on loopback, the CLI as run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from server.harness import RunningServer, start_server

from switchyard.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, in its own process (so its timing does not share our GIL)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "switchyard.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def bench_server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir, engine_overrides={"max_num_seqs": 8})
    yield running
    running.stop()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_random_workload_end_to_end(
    bench_server: RunningServer, tiny_model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    done = run_cli(
        *(
            "bench",
            "serve",
            "--base-url",
            bench_server.base_url,
            "--num-prompts",
            "12",
            "--request-rate",
            "40",
        ),
        *("--input-len", "16", "--output-len", "10", "--ignore-eos", "--tokenizer", str(tiny_model_dir)),
        *("--slo", "ttft_p99=30s,tpot_p99=10s", "--output-dir", str(out), "--quiet"),
    )
    assert done.returncode == 0, done.stderr
    assert "SLO ttft_p99 ≤ 30000 ms, tpot_p99 ≤ 10000 ms: MET" in done.stdout
    rows = read_jsonl(out / "requests.jsonl")
    assert len(rows) == 12 and sorted(r["index"] for r in rows) == list(range(12))
    for row in rows:
        assert row["error"] is None and row["output_tokens"] == 10  # ignore_eos: exactly max_tokens
        assert 16 <= row["prompt_tokens"] <= 18  # the exact-length prompt plus any BOS the template adds
        assert 0 < row["ttft"] <= row["e2e"] and all(gap >= 0 for gap in row["itl"])
        assert row["ttft"] + sum(row["itl"]) <= row["e2e"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 12 and summary["failed"] == 0 and summary["slo_met"] is True
    assert summary["total_output_tokens"] == 120
    assert summary["goodput"] == pytest.approx(summary["request_throughput"])
    report = (out / "report.md").read_text()
    assert "| TTFT |" in report and "model `tiny`" in report  # the model came from /v1/models
    assert (out / "report.png").stat().st_size > 10_000


def test_chat_sessions_grow_and_prefixes_hit_the_cache(bench_server: RunningServer, tmp_path: Path) -> None:
    common = ["--base-url", bench_server.base_url, "--quiet", "--no-report", "--ignore-eos", "--warmup", "0"]
    chat = ["bench", "serve", *common, "--workload", "chat", "--turns", "3", "--num-prompts", "2"]
    assert main([*chat, "--input-len", "6", "--output-len", "5", "--output-dir", str(tmp_path / "chat")]) == 0
    rows = read_jsonl(tmp_path / "chat" / "requests.jsonl")
    assert len(rows) == 6 and all(r["error"] is None for r in rows)
    for session in (0, 1):
        turns = sorted((r for r in rows if r["session"] == session), key=lambda r: r["turn"])
        prompts = [r["prompt_tokens"] for r in turns]
        # Each turn carries the previous turns and the server's replies (5 tokens each, re-tokenized).
        assert prompts[0] < prompts[1] < prompts[2], prompts

    prefix = ["bench", "serve", *common, "--workload", "prefix", "--prefix-len", "40", "--num-prefixes", "1"]
    args = ["--num-prompts", "6", "--max-concurrency", "1", "--input-len", "4", "--output-len", "2"]
    assert main([*prefix, *args, "--output-dir", str(tmp_path / "prefix")]) == 0
    rows = sorted(read_jsonl(tmp_path / "prefix" / "requests.jsonl"), key=lambda r: r["index"])
    assert all(r["error"] is None for r in rows)
    assert all(r["cached_tokens"] >= 16 for r in rows[1:])  # the shared prefix's full blocks are reused


def test_tenant_sessions_reuse_their_tenants_system_prompt(
    bench_server: RunningServer, tmp_path: Path
) -> None:
    common = ["--base-url", bench_server.base_url, "--quiet", "--no-report", "--ignore-eos", "--warmup", "0"]
    tenants = [
        "bench",
        "serve",
        *common,
        "--workload",
        "tenants",
        "--prefix-len",
        "40",
        "--num-prefixes",
        "2",
    ]
    args = [
        "--turns",
        "2",
        "--num-prompts",
        "4",
        "--max-concurrency",
        "1",
        "--input-len",
        "4",
        "--output-len",
        "3",
    ]
    assert main([*tenants, *args, "--output-dir", str(tmp_path / "tenants")]) == 0
    rows = sorted(read_jsonl(tmp_path / "tenants" / "requests.jsonl"), key=lambda r: r["start"])
    assert len(rows) == 8 and all(r["error"] is None for r in rows)
    for session in range(4):
        turns = sorted((r for r in rows if r["session"] == session), key=lambda r: r["turn"])
        assert turns[0]["prompt_tokens"] < turns[1]["prompt_tokens"]  # the history grows
    # One at a time: only each tenant's first request computes its system prompt; the rest find it cached.
    first_of_tenant = {next(r["index"] for r in rows if r["session"] % 2 == tenant) for tenant in (0, 1)}
    assert all(r["cached_tokens"] == 0 for r in rows if r["index"] in first_of_tenant)
    assert all(r["cached_tokens"] >= 32 for r in rows if r["index"] not in first_of_tenant)


def test_a_run_where_every_request_failed_exits_non_zero(bench_server: RunningServer, tmp_path: Path) -> None:
    """Prompts longer than the server's context: each request is a 400, so nothing was measured."""
    out = tmp_path / "failed"
    done = run_cli(
        *("bench", "serve", "--base-url", bench_server.base_url, "--num-prompts", "3", "--warmup", "0"),
        *("--input-len", "400", "--output-len", "4", "--output-dir", str(out), "--quiet", "--no-report"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "all 3 requests failed" in done.stderr and "Traceback" not in done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["completed"], summary["failed"]) == (0, 3)
    assert "maximum context length" in " ".join(summary["error_examples"].values())


def test_bad_arguments_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    serve = ["bench", "serve", "--output-dir", str(tmp_path / "x")]
    for args, message in [
        (["--workload", "jsonl", "--dataset", str(tmp_path / "missing.jsonl")], "--dataset file not found"),
        (["--workload", "jsonl"], "needs --dataset"),
        (["--slo", "ttft_p99=soon"], "cannot read SLO term"),
        (["--request-rate", "-2"], "must be > 0.0"),
        (["--max-concurrency", "0"], "must be >= 1"),
        (["--find-max-rate"], "--find-max-rate needs --slo"),
        (["--workload", "chat", "--api", "completions"], "needs the chat API"),
        (["--extra-body", "[1]"], "expected a JSON object"),
    ]:
        with pytest.raises(SystemExit) as info:
            main([*serve, *args])
        assert info.value.code == 2
        assert message in capsys.readouterr().err, args
    # Nothing listens on port 9 of loopback: a one-line error and exit status 2, no traceback.
    assert main([*serve, "--base-url", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach http://127.0.0.1:9/v1" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_offline_with_the_transformers_baseline(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    result = tmp_path / "offline.json"
    code = main(
        [
            *("bench", "offline", "--model", str(tiny_model_dir), "--num-prompts", "4", "--input-len", "12"),
            *("--output-len", "6", "--baseline", "hf", "--hf-batch-size", "2", "--dtype", "float32"),
            *("--repeats", "2", "--decode-len", "4"),
            *(
                "--device",
                "cpu",
                "--max-model-len",
                "64",
                "--kv-cache-memory",
                str(4 << 20),
                "--json",
                str(result),
            ),
        ]
    )
    assert code == 0
    assert "throughput ratio:" in capsys.readouterr().out
    data = json.loads(result.read_text())
    assert data["switchyard_tok_s"] > 0 and data["hf_tok_s"] > 0
    assert data["throughput_ratio"] == pytest.approx(data["switchyard_tok_s"] / data["hf_tok_s"])
    assert len(data["trials"]) == 2  # alternating runs; the result keeps each side's best
    assert data["switchyard_tok_s"] == max(t["switchyard_tok_s"] for t in data["trials"])
    assert data["batch1_ratio"] > 0


def test_find_max_rate_converges_on_a_known_capacity(tiny_model_dir: Path, tmp_path: Path) -> None:
    """One sequence at a time: capacity is 1 / (one request's latency), and the search must bracket it."""
    server = start_server(tiny_model_dir, engine_overrides={"max_num_seqs": 1})
    try:
        request = ["--base-url", server.base_url, "--input-len", "20", "--output-len", "24", "--ignore-eos"]
        single = tmp_path / "single"
        args = [*request, "--num-prompts", "5", "--max-concurrency", "1", "--quiet", "--no-report"]
        assert main(["bench", "serve", *args, "--output-dir", str(single)]) == 0
        latency = json.loads((single / "summary.json").read_text())["e2e"]["median"]
        capacity = 1 / latency
        out = tmp_path / "search"
        done = run_cli(
            *("bench", "serve", *request, "--find-max-rate", "--slo", f"ttft_p99={3 * latency:.4f}"),
            *("--request-rate", f"{capacity / 2:.3f}", "--duration", "1.5", "--burstiness", "20"),
            *("--search-tolerance", "0.2", "--max-probes", "7", "--min-rate", f"{capacity / 20:.3f}"),
            *("--output-dir", str(out), "--quiet"),
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    trace = json.loads((out / "search.json").read_text())
    probes = trace["probes"]
    assert trace["max_rate"] is not None and trace["min_failing_rate"] is not None, probes
    by_rate = {p["rate"]: p for p in probes}
    assert by_rate[trace["max_rate"]]["meets"] and by_rate[trace["max_rate"]]["summary"]["slo_met"]
    assert not by_rate[trace["min_failing_rate"]]["meets"]
    assert trace["max_rate"] < trace["min_failing_rate"]
    # Once bracketed, every probe falls strictly inside the bracket, which only narrows.
    low = high = None
    for probe in probes:
        if low is not None and high is not None:
            assert low < probe["rate"] < high
        if probe["meets"]:
            low = probe["rate"] if low is None else max(low, probe["rate"])
        else:
            high = probe["rate"] if high is None else min(high, probe["rate"])
    # Beyond capacity the queue grows by (rate × latency − 1) per request: the SLO of 3 latencies caps the
    # rate near capacity (wide bounds: this runs on shared CPUs).
    assert capacity / 4 <= trace["max_rate"] <= 3 * capacity, (capacity, trace["max_rate"])
    report = (out / "report.md").read_text()
    assert "Max rate meeting the SLO" in report and (out / "report.png").is_file()
    assert len(list(out.glob("probe-*.jsonl"))) == len(probes)
    # Each probe sends fresh prompts: none reuses an earlier probe's (its full first block would be cached).
    assert all(p["summary"]["cached_tokens"] == 0 for p in probes)


def test_offline_repeats_recompute_their_prompts(tiny_model_dir: Path) -> None:
    """A repeat of the same prompts must not be served from the prefix cache the first run filled: it would
    time decoding alone and inflate the best-of ratio."""
    from switchyard import LLM
    from switchyard.bench.offline import OfflineWorkload, run_offline

    llm = LLM(str(tiny_model_dir), dtype="float32", skip_tokenizer=True, max_model_len=128)
    workload = OfflineWorkload(num_prompts=4, input_len=40, output_len=4, prefix_len=0, seed=0)
    result = run_offline(llm, workload, repeats=2)
    assert len(result.trials) == 2
    stats = llm.engine.stats()
    assert stats.prefix_cache_queries > 0
    assert stats.prefix_cache_hits == 0
