"""The runtime's wheel: it ships the bundled weights and no training code.

Built with pip from a copy of the sources (so the checkout gets no build/ or egg-info), with a stand-in
`switchyard_training` package beside `switchyard/` where a loose package pattern would pick it up.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLED_WEIGHTS = ROOT / "switchyard" / "models" / "bundled"


def build_wheel(tmp_path: Path) -> zipfile.ZipFile:
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    for folder in ("switchyard", "training"):
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    stand_in = source / "switchyard_training"
    stand_in.mkdir()
    (stand_in / "__init__.py").write_text(
        '"""Stand-in: the training package must never ship in the wheel."""\n'
    )
    out = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w",
         str(out)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    (wheel,) = out.glob("switchyard-*.whl")
    return zipfile.ZipFile(wheel)


def test_the_wheel_ships_the_weights_and_no_training_code(tmp_path: Path) -> None:
    names = set(build_wheel(tmp_path).namelist())
    assert "switchyard/engine/engine.py" in names and "switchyard/kv_budget.py" in names
    console = {
        "index.html",
        "console.css",
        "js/app.js",
        "vendor/uplot/uPlot.iife.min.js",
        "vendor/uplot/LICENSE",
    }
    assert {f"switchyard/console/static/{name}" for name in console} <= names, (
        "the console's pages are missing"
    )
    training = sorted(
        n for n in names if n.startswith("switchyard_training/") or n.startswith("switchyard/bundled/")
    )
    assert not training, f"training code in the wheel: {training[:5]}"
    weights = {path.relative_to(ROOT).as_posix() for path in BUNDLED_WEIGHTS.rglob("*") if path.is_file()}
    assert any(name.endswith(".safetensors") for name in weights), "no bundled weights in the checkout"
    assert weights <= names, f"bundled files missing from the wheel: {sorted(weights - names)[:5]}"
