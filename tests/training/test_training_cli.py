"""With the training package installed, `switchyard` runs its commands."""

from __future__ import annotations

import pytest

from switchyard.cli import main


@pytest.mark.parametrize(
    ("command", "prog"),
    [
        ("train-default", "switchyard train-default"),
        ("eval-default", "switchyard eval-default"),
        ("train-speculator", "switchyard train-speculator"),
    ],
)
def test_training_commands_run_from_the_training_package(
    command: str, prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {prog}")
