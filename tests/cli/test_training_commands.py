"""The training commands live in the separate training package: without it, a one-line error says how to
install it (exit 2) instead of a traceback."""

from __future__ import annotations

import sys

import pytest

from switchyard.cli import main


@pytest.mark.parametrize("command", ["train-default", "eval-default", "train-speculator"])
def test_a_training_command_without_the_training_package_says_how_to_install_it(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [name for name in sys.modules if name.startswith("switchyard_training.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "switchyard_training", None)  # importing it now fails as if absent
    assert main([command, "--help"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert f"switchyard {command}: error: the training package is not installed" in captured.err
    assert "pip install -e ./training" in captured.err and "make test" in captured.err


def test_other_commands_do_not_need_the_training_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "switchyard_training", None)
    with pytest.raises(SystemExit) as info:
        main(["plan", "--help"])
    assert info.value.code == 0 and "training package" not in capsys.readouterr().err
