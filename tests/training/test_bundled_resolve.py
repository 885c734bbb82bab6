from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.errors import ModelLoadError
from switchyard.models import registry
from switchyard.models.registry import (
    BUNDLED_DIR,
    BUNDLED_MODELS,
    DRAFT_MODEL,
    MAIN_MODEL,
    SPECULATOR_MODEL,
    BundledModelNotBuiltError,
    ModelNotFoundError,
    resolve_model,
)


def test_bundled_names_point_into_the_package() -> None:
    assert set(BUNDLED_MODELS) == {MAIN_MODEL, DRAFT_MODEL, SPECULATOR_MODEL}
    assert Path(registry.__file__).parent / "bundled" == BUNDLED_DIR
    assert all(path.parent == BUNDLED_DIR for path in BUNDLED_MODELS.values())


def test_existing_folder_resolves_to_itself(tmp_path: Path) -> None:
    assert resolve_model(tmp_path) == tmp_path.resolve()
    assert resolve_model(str(tmp_path)) == tmp_path.resolve()


def test_unknown_name_lists_bundled_models(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model(tmp_path / "missing")
    assert MAIN_MODEL in str(info.value) and DRAFT_MODEL in str(info.value)
    assert isinstance(info.value, ModelLoadError)


def test_unbuilt_bundled_model_says_how_to_build_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(BUNDLED_MODELS, MAIN_MODEL, tmp_path / MAIN_MODEL)
    with pytest.raises(BundledModelNotBuiltError, match="switchyard train-default"):
        resolve_model(MAIN_MODEL)


def test_built_bundled_model_resolves(bundled_trained, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = bundled_trained
    monkeypatch.setitem(BUNDLED_MODELS, MAIN_MODEL, folder / MAIN_MODEL)
    assert resolve_model(MAIN_MODEL) == folder / MAIN_MODEL
