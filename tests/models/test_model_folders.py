"""Bundled model names resolve to folders at the config edge; the engine itself loads folders only."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine_args import resolve_model_folders
from switchyard.errors import ModelLoadError
from switchyard.models.registry import (
    BUNDLED_MODELS,
    DRAFT_MODEL,
    MAIN_MODEL,
    SPECULATOR_MODEL,
    ModelNotFoundError,
)


def bundled(name: str) -> str:
    return str(BUNDLED_MODELS[name])


def test_bundled_names_become_their_folders() -> None:
    config = resolve_model_folders(EngineConfig(model=MAIN_MODEL, dtype="float32"))
    assert config.model == bundled(MAIN_MODEL) and config.dtype == "float32"
    assert config.speculative_model is None


@pytest.mark.parametrize(("method", "default"), [("draft", DRAFT_MODEL), ("speculator", SPECULATOR_MODEL)])
def test_the_bundled_model_brings_its_draft_and_speculator(method: str, default: str) -> None:
    config = resolve_model_folders(EngineConfig(model=MAIN_MODEL, speculative_method=method))
    assert config.speculative_model == bundled(default)
    named = resolve_model_folders(
        EngineConfig(model=MAIN_MODEL, speculative_method=method, speculative_model=SPECULATOR_MODEL)
    )
    assert named.speculative_model == bundled(SPECULATOR_MODEL)


def test_other_models_get_no_default_draft(tiny_model_dir: Path) -> None:
    config = resolve_model_folders(EngineConfig(model=str(tiny_model_dir), speculative_method="draft"))
    assert config.model == str(tiny_model_dir.resolve()) and config.speculative_model is None
    ngram = resolve_model_folders(EngineConfig(model=MAIN_MODEL, speculative_method="ngram"))
    assert ngram.speculative_model is None, "prompt lookup needs no model"


def test_resolving_twice_changes_nothing(tiny_model_dir: Path) -> None:
    config = resolve_model_folders(
        EngineConfig(
            model=str(tiny_model_dir), speculative_method="draft", speculative_model=str(tiny_model_dir)
        )
    )
    assert resolve_model_folders(config) == config


def test_unknown_names_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no model folder"):
        resolve_model_folders(EngineConfig(model=str(tmp_path / "missing")))
    with pytest.raises(ModelNotFoundError):
        resolve_model_folders(
            EngineConfig(model=MAIN_MODEL, speculative_method="draft", speculative_model="no-such-draft")
        )


def test_the_engine_takes_folders_not_names() -> None:
    with pytest.raises(ModelLoadError, match="no model folder"):
        LLMEngine(EngineConfig(model="no-such-model"))
