"""The `switchyard` command line: help, the offline demo, generate, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.cli import main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("generate", "serve", "train-default", "eval-default", "demo"):
        assert command in out


def test_demo_runs_the_engine_offline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--max-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 requests" in out and "switchyard train-default" in out


def test_generate_prints_completions(tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["generate", "--model", str(tiny_model_dir), "--max-tokens", "5", "--dtype", "float32", "hello"]
    )
    assert code == 0
    assert "### hello" in capsys.readouterr().out


def test_unknown_model_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["generate", "--model", str(tmp_path / "missing"), "hi"]) == 2
    err = capsys.readouterr().err
    assert "switchyard: error:" in err and "no model folder" in err
