"""What makes a training run resumable: atomic checkpoints with RNG states, and a fingerprint of the packed
rows, so a resume refuses rows other than those its checkpoints were trained on."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path
from typing import Any

import torch

from switchyard_training.data import PackedRows

CHECKPOINT_FILE = "state.pt"
"""A model's checkpoint in its checkpoint folder: weights, optimizer, scheduler, RNG states, step, losses."""
DONE_FILE = "done.json"
"""Written once a model's folder is exported (its `TrainResult`); a resume skips that model."""


def rng_state() -> dict[str, Any]:
    """Python's and torch's RNG states, saved with a checkpoint so a resumed run draws what it would have."""
    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically: an interrupted save leaves the previous checkpoint intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


ROWS_FINGERPRINT_FILE = "rows.sha256"
"""The packed rows' fingerprint in the checkpoint dir (`check_rows_fingerprint`)."""


class ResumeMismatchError(ValueError):
    """A resume whose training rows differ from those its checkpoints were trained on."""


def rows_fingerprint(rows: PackedRows) -> str:
    digest = hashlib.sha256()
    for tensor in (rows.input_ids, rows.labels):
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def check_rows_fingerprint(checkpoint_dir: Path, rows: PackedRows, resume: bool) -> None:
    """A resumed run must train on the rows it started with: data order is a function of (seed, step), so other
    rows (a flag left out, or a default changed since, such as `--no-message-tool` for runs up to 27) would go on
    silently with another corpus. ResumeMismatchError in that case; a fresh start records the fingerprint."""
    path = checkpoint_dir / ROWS_FINGERPRINT_FILE
    fingerprint = rows_fingerprint(rows)
    if resume and path.is_file() and path.read_text().strip() != fingerprint:
        raise ResumeMismatchError(
            f"the training rows differ from those the checkpoints in {checkpoint_dir} were trained on: resume "
            "with the flags the run started with (a default may have changed since; see the model card's command)"
        )
    path.write_text(fingerprint + "\n")
