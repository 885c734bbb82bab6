"""`train-speculator` as a preemptible batch job: checkpoints, a stop after the step in progress, and a resume
that skips the batches already trained on and ends with the weights an uninterrupted run ends with."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from switchyard_training.checkpoint import CHECKPOINT_FILE, ResumeMismatchError
from switchyard_training.data import TokenizedExample
from switchyard_training.train import PREEMPTED_EXIT
from switchyard_training.train_loop import TrainingPreempted
from switchyard_training.train_speculator import (
    SpeculatorCheckpoints,
    SpeculatorRecipe,
    fit_speculator,
    load_target,
    new_speculator,
)
from tests.training.test_train_speculator import write_conversations

STEPS = 12
RECIPE = SpeculatorRecipe(num_steps=2, minutes=5.0, lr=1e-2, warmup_steps=3)


def batches() -> Iterator[list[TokenizedExample]]:
    """A deterministic stream, as the corpus is: every call yields the same batches."""
    rng = random.Random(5)
    for _ in range(STEPS + 5):
        examples = []
        for _ in range(4):
            ids = [rng.randrange(5, 300) for _ in range(rng.randrange(8, 24))]
            examples.append(TokenizedExample(ids=ids, loss_mask=[i >= 3 for i in range(len(ids))]))
        yield examples


def fresh(folder: Path) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    target = load_target(folder, torch.float32)
    target.requires_grad_(False)
    return target, new_speculator(target, RECIPE.num_steps)


def stop_after(stream: Iterator[list[TokenizedExample]], draws: int, stop: threading.Event) -> Iterator:
    """Sets `stop` while the `draws`-th batch trains, as a SIGTERM arriving mid-step would."""
    for index, item in enumerate(stream, start=1):
        if index == draws:
            stop.set()
        yield item


def test_a_preempted_run_resumes_to_the_uninterrupted_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    target, straight = fresh(tiny_model_dir)
    done = fit_speculator(straight, target, batches(), RECIPE, max_steps=STEPS, progress=False)
    assert done[0] == STEPS

    run = {"model": "tiny", "recipe": "test"}
    checkpoints = SpeculatorCheckpoints(tmp_path / "ckpt", every_steps=4, run=run)
    target, first = fresh(tiny_model_dir)
    stop = threading.Event()
    with pytest.raises(TrainingPreempted) as preempted:
        fit_speculator(
            first,
            target,
            stop_after(batches(), 7, stop),
            RECIPE,
            max_steps=STEPS,
            progress=False,
            checkpoints=checkpoints,
            stop=stop,
        )
    assert preempted.value.step == 7  # the step in progress finished and was saved, not the one at 4
    saved = torch.load(tmp_path / "ckpt" / CHECKPOINT_FILE, weights_only=False)
    assert saved["steps"] == 7 and saved["run"] == run

    target, second = fresh(tiny_model_dir)  # a new process: weights from scratch until the checkpoint loads
    resumed = SpeculatorCheckpoints(tmp_path / "ckpt", resume=True, every_steps=4, run=run)
    steps, positions, loss = fit_speculator(
        second, target, batches(), RECIPE, max_steps=STEPS, progress=False, checkpoints=resumed
    )
    assert (steps, positions) == done[:2] and loss == pytest.approx(done[2])
    for name, value in straight.state_dict().items():
        assert torch.equal(value, second.state_dict()[name]), name


def test_a_resume_refuses_another_runs_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    target, speculator = fresh(tiny_model_dir)
    checkpoints = SpeculatorCheckpoints(tmp_path, run={"seed": 1})
    fit_speculator(
        speculator, target, batches(), RECIPE, max_steps=2, progress=False, checkpoints=checkpoints
    )
    other = SpeculatorCheckpoints(tmp_path, resume=True, run={"seed": 2})
    with pytest.raises(ResumeMismatchError, match="another run"):
        fit_speculator(speculator, target, batches(), RECIPE, max_steps=4, progress=False, checkpoints=other)
    # Without --resume the same folder starts over (and overwrites it).
    fresh_start = SpeculatorCheckpoints(tmp_path, run={"seed": 2})
    assert (
        fit_speculator(
            speculator, target, batches(), RECIPE, max_steps=1, progress=False, checkpoints=fresh_start
        )[0]
        == 1
    )


@pytest.mark.slow  # two processes that load torch and a model
def test_the_command_exits_75_on_sigterm_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The real command in its own process, as the platform runs it: SIGTERM checkpoints and exits 75; the
    same command with --resume counts the time already spent and finishes."""
    data = tmp_path / "chats.jsonl"
    write_conversations(data, 12)
    checkpoint_dir, output = tmp_path / "ckpt", tmp_path / "speculator"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}

    def command(minutes: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "switchyard_training.train_speculator",
            *("--model", str(tiny_model_dir), "--data", str(data), "--eval-examples", "2"),
            *("--minutes", minutes, "--output", str(output), "--checkpoint-dir", str(checkpoint_dir)),
            *("--resume", "--checkpoint-every", "1", "--threads", "1"),
        ]

    process = subprocess.Popen(command("10"), env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (checkpoint_dir / CHECKPOINT_FILE).is_file():  # a step is done: it is training
        assert process.poll() is None and time.monotonic() < deadline, "no checkpoint before the deadline"
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == PREEMPTED_EXIT, stderr
    assert "continue with --resume" in stderr and not output.exists()
    stopped_at = torch.load(checkpoint_dir / CHECKPOINT_FILE, weights_only=False)["steps"]
    assert stopped_at >= 1

    # The time already spent exceeds this budget: the resumed run trains no further step, then writes out.
    finished = subprocess.run(command("0.001"), env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["steps"] == stopped_at
    assert (output / "README.md").is_file()
