"""`switchyard train-speculator` end to end on the bundled main model, with a budget of seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from switchyard.bundled import BUNDLED_MODELS, MAIN_MODEL, is_built
from switchyard.bundled.train_speculator import main
from switchyard.models.speculator import load_speculator

pytestmark = pytest.mark.skipif(
    not is_built(BUNDLED_MODELS[MAIN_MODEL]), reason="bundled model not built yet"
)


def test_train_speculator_writes_a_loadable_folder_with_its_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "speculator"
    assert main(["--minutes", "0.1", "--steps", "2", "--eval-examples", "8", "--output", str(output)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["steps"] >= 1 and result["positions"] > 0 and len(result["step_agreement"]) == 2
    speculator = load_speculator(output, torch.float32)
    assert speculator.config.num_steps == 2 and speculator.config.hidden_size == 256
    card = (output / "README.md").read_text()
    assert "| step 1 | step 2 | mean leading run |" in card and "switchyard train-speculator" in card


@pytest.mark.parametrize("args", [["--minutes", "0"], ["--steps", "0"], ["--eval-examples", "0"]])
def test_train_speculator_refuses_empty_budgets(args: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main([*args, "--output", str(tmp_path)])
    assert info.value.code == 2
    assert not any(tmp_path.iterdir())
