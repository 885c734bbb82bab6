"""A small real training-like job: a deterministic sum over STEPS steps that checkpoints and resumes.

    python checkpointing_job.py WORKDIR STEPS STEP_SECONDS

It saves its state to WORKDIR/checkpoint.json every few steps and when it gets SIGTERM or SIGUSR1 (then exits
0, as a job told to checkpoint does), resumes from that file when it starts again, and writes the final
total to WORKDIR/result.json. Each run appends its attempt, GPUs and starting step to WORKDIR/runs.jsonl.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

workdir, steps, step_seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
checkpoint = workdir / "checkpoint.json"
state = json.loads(checkpoint.read_text()) if checkpoint.is_file() else {"step": 0, "total": 0}
stop = False


def save() -> None:
    temporary = checkpoint.with_suffix(".tmp")
    temporary.write_text(json.dumps(state))
    os.replace(temporary, checkpoint)
    Path(os.environ["SWITCHYARD_CHECKPOINT_MARKER"]).touch()  # tells the platform how fresh its work is


def on_signal(number: int, frame: object) -> None:
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGUSR1, on_signal)
with (workdir / "runs.jsonl").open("a") as runs:
    run = {
        "attempt": os.environ.get("SWITCHYARD_JOB_ATTEMPT"),
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "from_step": state["step"],
        "pid": os.getpid(),
    }
    runs.write(json.dumps(run) + "\n")
while state["step"] < steps:
    if stop:
        save()
        sys.exit(0)
    step = state["step"]
    state["total"] = (state["total"] * 31 + step * step + 7) % 1_000_003
    state["step"] = step + 1
    if state["step"] % 5 == 0:
        save()
    time.sleep(step_seconds)
save()
(workdir / "result.json").write_text(json.dumps({"total": state["total"], "steps": steps}))
