"""Shared fixtures: a small corpus, a small tokenizer trained on it, and a tiny model trained for a few steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from switchyard_training.corpus import CorpusConfig, generate_corpus
from switchyard_training.example import Example
from switchyard_training.pipeline import train_default
from switchyard_training.tokenizer_training import corpus_texts, train_tokenizer
from switchyard_training.train_loop import TrainResult
from tests.training.factory import tiny_recipe


@pytest.fixture(scope="session")
def bundled_corpus() -> list[Example]:
    return generate_corpus(CorpusConfig(seed=0, size=400))


@pytest.fixture(scope="session")
def bundled_tokenizer(bundled_corpus: list[Example]) -> Tokenizer:
    return train_tokenizer(corpus_texts(bundled_corpus), vocab_size=1200)


@pytest.fixture(scope="session")
def bundled_trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, TrainResult]]:
    """Both bundled models, tiny, trained 5 and 2 steps by the real train_default pipeline."""
    root = tmp_path_factory.mktemp("bundled")
    results = train_default(root / "models", root / "ckpt", time_budget_minutes=5, seed=0, recipe=tiny_recipe(),
                            progress=False)  # fmt: skip
    return root / "models", results
