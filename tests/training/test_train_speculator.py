"""`switchyard train-speculator` end to end on the bundled main model, with a budget of seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from switchyard.models.registry import BUNDLED_MODELS, MAIN_MODEL, is_built
from switchyard.models.speculator import load_speculator
from switchyard_training.train_speculator import main

pytestmark = pytest.mark.skipif(
    not is_built(BUNDLED_MODELS[MAIN_MODEL]), reason="bundled model not built yet"
)


bundled_only = pytest.mark.skipif(
    not is_built(BUNDLED_MODELS[MAIN_MODEL]), reason="bundled model not built yet"
)


@bundled_only
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


def write_conversations(path: Path, count: int) -> None:
    lines = ["not json", json.dumps({"no": "messages"})]
    for index in range(count):
        messages = [
            {"role": "user", "content": f"Say the word number {index}."},
            {"role": "assistant", "content": f"The word number {index} is apple {index}."},
            {"role": "user", "content": "Again."},
            {"role": "assistant", "content": f"Apple {index}, again."},
        ]
        lines.append(json.dumps({"messages": messages}))
    path.write_text("\n".join(lines) + "\n")


def test_train_speculator_on_own_conversations(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--data: conversations rendered with the model's own template (malformed lines skipped), the last ones
    held out; the speculator fits that model's hidden size."""
    from switchyard.models.tokenizer import load_tokenizer
    from switchyard_training.chat_data import chat_examples

    data = tmp_path / "chats.jsonl"
    write_conversations(data, 12)
    examples = list(chat_examples(data, load_tokenizer(tiny_model_dir)))
    assert len(examples) == 12
    tokenizer = load_tokenizer(tiny_model_dir)
    marked = tokenizer.decode([t for t, m in zip(examples[3].ids, examples[3].loss_mask, strict=True) if m])
    assert "apple 3" in marked and "Apple 3, again." in marked and "Say the word" not in marked
    output = tmp_path / "speculator"
    args = ["--model", str(tiny_model_dir), "--data", str(data), "--minutes", "0.05", "--eval-examples", "2"]
    assert main([*args, "--output", str(output)]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] >= 1
    assert load_speculator(output, torch.float32).config.hidden_size == 64
    assert "12 conversations" not in (output / "README.md").read_text()  # 10 trained, 2 held out
    assert "10 conversations of chats.jsonl" in (output / "README.md").read_text()


def test_train_speculator_refuses_data_it_cannot_use(tiny_model_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not json\n")
    for data in (tmp_path / "missing.jsonl", empty):
        with pytest.raises(SystemExit) as info:
            main(["--model", str(tiny_model_dir), "--data", str(data), "--output", str(tmp_path / "out")])
        assert info.value.code == 2
    assert not (tmp_path / "out").exists()
