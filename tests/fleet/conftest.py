"""Fixtures of the launcher tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def launcher_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model in a folder of this module's own, so counting the `switchyard serve` processes of that
    folder counts only the replicas this module's launchers started (the gateway tests keep their own
    replicas of the shared folder running)."""
    return Path(shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("launcher") / "tiny"))
