"""`switchyard eval` is a client of the API: importing it (runner, agent and RAG cases, reports) loads no torch,
and the front door delegates to it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from switchyard.cli import DELEGATED_COMMANDS, main


def test_importing_the_harness_loads_no_torch() -> None:
    code = (
        "import sys\n"
        "import switchyard.evals.cli, switchyard.evals.runner, switchyard.evals.ab, switchyard.evals.report\n"
        "import switchyard.evals.agent_case, switchyard.evals.rag_case, switchyard.evals.plots\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert 'switchyard.engine' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_front_door_delegates_eval_and_keeps_eval_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert DELEGATED_COMMANDS["eval"][0] == "switchyard.evals.cli"
    assert DELEGATED_COMMANDS["eval-default"][0] == "switchyard_training.quality"
    assert main(["eval", "list"]) == 0
    out = capsys.readouterr().out
    assert "bundled-gate: 1757 chat cases" in out and "tool_arguments:" in out
    with pytest.raises(SystemExit) as info:
        main(["eval", "run", "--help"])
    assert info.value.code == 0 and "--baseline" in capsys.readouterr().out
