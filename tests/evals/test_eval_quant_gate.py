"""`switchyard eval quant`: the verdict's thresholds on crafted numbers, and a real gate of the bundled model
(two servers on loopback, a slice of its suite) whose verdict the server then finds."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from eval_helpers import run_cli

from switchyard.evals.quant_gate import GateRequest, GateThresholds, verdict
from switchyard.models.registry import BUNDLED_MODELS, MAIN_MODEL, is_built
from switchyard.quant_gates import read_gate


def _verdict(perplexities: tuple[float, float], success: tuple[float, float], regressions: list[str]):  # type: ignore[no-untyped-def]
    return verdict(
        method="int8",
        model_root="/m",
        perplexities=perplexities,
        scored_tokens=100,
        agreement=(0.9, 0.8),
        success=success,
        cases=10,
        regressions=regressions,
        thresholds=GateThresholds(max_perplexity_increase=0.03, max_success_drop=0.01),
    )


def test_the_verdict_applies_each_rollback_threshold() -> None:
    assert _verdict((10.0, 10.29), (0.90, 0.891), []).passed
    failed = _verdict((10.0, 10.31), (0.90, 0.90), [])
    assert not failed.passed and "perplexity +3.1%" in failed.reason
    failed = _verdict((10.0, 10.0), (0.90, 0.88), [])
    assert not failed.passed and "success rate -2.0 points" in failed.reason
    failed = _verdict((10.0, 9.0), (0.90, 0.95), ["tool_arguments"])
    assert not failed.passed and "tool_arguments" in failed.reason
    assert _verdict((10.0, 9.0), (0.90, 0.95), []).passed  # better is fine


def test_exactly_one_quantized_side_is_named() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        GateRequest(model="m")
    with pytest.raises(ValueError, match="exactly one"):
        GateRequest(model="m", quantization="int8", candidate="folder")


@pytest.mark.skipif(not is_built(BUNDLED_MODELS[MAIN_MODEL]), reason="the bundled model is not built")
def test_a_gate_of_the_bundled_model_is_recorded_where_the_server_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SWITCHYARD_HOME", str(tmp_path / "home"))
    output = tmp_path / "gate"
    finished = run_cli(
        "quant", MAIN_MODEL, "--quantization", "int8", "--limit", "6", "--no-progress",
        "--output-dir", str(output),
    )  # fmt: skip
    out = finished.stdout
    result = json.loads((output / "gate.json").read_text())
    assert finished.returncode == (0 if result["passed"] else 1), finished.stderr
    assert result["method"] == "int8" and result["cases"] == 6 and result["scored_tokens"] > 1000
    assert 0.5 < result["perplexity_quantized"] / result["perplexity_base"] < 2
    assert "perplexity" in out and "suite success" in out
    assert read_gate(BUNDLED_MODELS[MAIN_MODEL], "int8") == {"model": result["model_root"], **result}

    # the engine finds that verdict; with none recorded (int4 here) it warns
    from switchyard.engine.builder import _warn_without_gate
    from switchyard.models.quantization.methods import QuantizationSpec

    with caplog.at_level(logging.WARNING, logger="switchyard.engine.builder"):
        _warn_without_gate(BUNDLED_MODELS[MAIN_MODEL], QuantizationSpec("int4"))
        _warn_without_gate(BUNDLED_MODELS[MAIN_MODEL], QuantizationSpec("int8"))
    warnings = [record.getMessage() for record in caplog.records]
    assert any("int4" in line and "no quality-gate result" in line for line in warnings)
    assert not any("int8" in line and "no quality-gate result" in line for line in warnings)
