"""`switchyard eval compare`, `run --baseline` and `eval ab`: a planted 10-point drop is flagged, the noise
between two runs of one endpoint at temperature 1 is not, and A/B interleaves the two sides."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from eval_helpers import read_jsonl, run_cli, write_suite
from server.harness import RunningServer

from switchyard.evals.ab import interleave
from switchyard.evals.compare import compare_runs
from switchyard.evals.results import ResultsFile
from switchyard.evals.suite import load_suite
from switchyard.evals.summary import RunFile

PATTERNS = {"vowel_e": "e", "two_vowels": "[aeiou].*[aeiou]", "digit": "[0-9]", "short": "^.{0,12}$"}
CASES = 120


@pytest.fixture(scope="module")
def noise_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Short random replies checked by patterns that pass a quarter to most of the time: every case's verdict
    is a coin flip at temperature 1, the hardest case for a test that must not cry wolf."""
    cases = [
        {
            "id": f"c{i:03d}",
            "messages": [{"role": "user", "content": f"Tell me about item {i}."}],
            "checks": [{"scorer": "regex", "metric": name, "pattern": p} for name, p in PATTERNS.items()],
        }
        for i in range(CASES)
    ]
    header = {"name": "noise", "params": {"max_tokens": 8}}
    return write_suite(tmp_path_factory.mktemp("noise") / "noise.jsonl", cases, header)


def run(server: RunningServer, suite: Path, out: Path, *flags: str):  # type: ignore[no-untyped-def]
    return run_cli("run", str(suite), "--base-url", f"{server.base_url}/v1", "--model", "tiny",
                   "--output-dir", str(out), "--no-progress", *flags)  # fmt: skip


def test_noise_at_temperature_1_is_not_a_regression(
    eval_server: RunningServer, noise_suite: Path, tmp_path: Path
) -> None:
    first = run(eval_server, noise_suite, tmp_path / "first", "--temperature", "1", "--seed", "1")
    second = run(eval_server, noise_suite, tmp_path / "second", "--temperature", "1", "--seed", "2",
                 "--baseline", str(tmp_path / "first"))  # fmt: skip
    assert first.returncode == 0 and second.returncode == 0, second.stdout + second.stderr
    assert "no significant regression" in second.stdout
    base, new = RunFile.read(tmp_path / "first"), RunFile.read(tmp_path / "second")
    comparison = compare_runs(base, new)
    changed = {c.metric: c.worse + c.better for c in comparison.changes if c.metric in PATTERNS}
    assert min(changed.values()) >= 10, f"the two samples barely differ, so this proves nothing: {changed}"
    assert not comparison.regressions
    assert (tmp_path / "second" / "compare.md").is_file() and (tmp_path / "second" / "compare.html").is_file()


def plant_drop(run: RunFile, metric: str, points: float) -> RunFile:
    """The run with `points` of `metric`'s pass rate taken away: that many passing cases now fail."""
    flips = round(points * len(run.cases))
    passing = [case_id for case_id, record in run.cases.items() if record.passed[metric]][:flips]
    assert len(passing) == flips, "not enough passing cases to plant the drop"
    cases = dict(run.cases)
    for case_id in passing:
        record = cases[case_id]
        cases[case_id] = replace(record, passed={**record.passed, metric: False, "success": False})
    return replace(run, cases=cases)


def test_a_planted_ten_point_drop_is_flagged(
    eval_server: RunningServer, noise_suite: Path, tmp_path: Path
) -> None:
    assert run(eval_server, noise_suite, tmp_path / "base", "--temperature", "0").returncode == 0
    base = RunFile.read(tmp_path / "base")
    planted = tmp_path / "planted" / "run.json"
    planted.parent.mkdir()
    planted.write_text(plant_drop(base, "short", 0.10).to_json())
    done = run_cli("compare", str(tmp_path / "base"), str(planted))
    assert done.returncode == 1, done.stdout + done.stderr
    comparison = json.loads((tmp_path / "planted" / "comparison.json").read_text())
    flagged = {c["metric"] for c in comparison["changes"] if c["regression"]}
    assert "short" in flagged and flagged <= {"short", "success"}
    short = next(c for c in comparison["changes"] if c["metric"] == "short")
    assert short["difference"] == pytest.approx(-0.10) and (short["worse"], short["better"]) == (12, 0)
    assert "REGRESSION" in done.stdout and "REGRESSION" in (tmp_path / "planted" / "compare.md").read_text()
    # a greedy rerun of the same endpoint is the same run: nothing to flag
    again = run(
        eval_server,
        noise_suite,
        tmp_path / "again",
        "--temperature",
        "0",
        "--baseline",
        str(tmp_path / "base"),
    )
    assert again.returncode == 0 and "no significant regression" in again.stdout


def test_latency_is_gated_only_with_a_tolerance(
    eval_server: RunningServer, noise_suite: Path, tmp_path: Path
) -> None:
    assert (
        run(eval_server, noise_suite, tmp_path / "base", "--temperature", "0", "--limit", "30").returncode
        == 0
    )
    base = RunFile.read(tmp_path / "base")
    slower = replace(base, cases={i: replace(r, latency_s=r.latency_s * 3) for i, r in base.cases.items()})
    reported = {c.metric: c for c in compare_runs(base, slower).changes}
    assert not reported["latency_s"].gated and not reported["latency_s"].regression
    gated = {c.metric: c for c in compare_runs(base, slower, tolerances={"latency_s": 0.5}).changes}
    assert gated["latency_s"].regression
    assert not {c.metric: c for c in compare_runs(base, slower, tolerances={"latency_s": 5.0}).changes}[
        "latency_s"
    ].regression  # three times slower is within a 500% tolerance


def test_ab_runs_both_sides_on_the_same_cases(
    eval_server: RunningServer, noise_suite: Path, tmp_path: Path
) -> None:
    url = f"{eval_server.base_url}/v1"
    done = run_cli("ab", str(noise_suite), "--base-url-a", url, "--model-a", "tiny", "--limit", "20",
                   "--temperature", "0", "--label-a", "plain", "--label-b", "again", "--output-dir",
                   str(tmp_path / "ab"), "--no-progress")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    a, b = (
        read_jsonl(tmp_path / "ab" / "a" / "cases.jsonl"),
        read_jsonl(tmp_path / "ab" / "b" / "cases.jsonl"),
    )
    assert {r["id"] for r in a} == {r["id"] for r in b} == {f"c{i:03d}" for i in range(20)}
    outputs = {r["id"]: r["output"]["content"] for r in a}
    assert all(
        outputs[r["id"]] == r["output"]["content"] for r in b
    )  # greedy: the same replies on both sides
    comparison = json.loads((tmp_path / "ab" / "comparison.json").read_text())
    assert comparison["base_label"] == "plain: tiny" and not any(
        c["regression"] for c in comparison["changes"]
    )
    assert "data:image/png;base64," in (tmp_path / "ab" / "compare.html").read_text()


def test_interleaving_alternates_which_side_goes_first(noise_suite: Path, tmp_path: Path) -> None:
    suite = load_suite(noise_suite)
    suite = replace(suite, cases=suite.cases[:4])
    files = {side: ResultsFile(tmp_path / side) for side in ("a", "b")}
    runners = {"a": "A", "b": "B"}
    everything = {side: {c.id for c in suite.cases} for side in ("a", "b")}
    jobs = interleave(suite, everything, runners, files)  # type: ignore[arg-type]
    assert [(j.runner, j.case.id) for j in jobs] == [("A", "c000"), ("B", "c000"), ("B", "c001"), ("A", "c001"),
                                                     ("A", "c002"), ("B", "c002"), ("B", "c003"), ("A", "c003")]  # fmt: skip
    resumed = interleave(suite, {"a": set(), "b": {"c001"}}, runners, files)  # type: ignore[arg-type]
    assert [(j.runner, j.case.id) for j in resumed] == [("B", "c001")]
