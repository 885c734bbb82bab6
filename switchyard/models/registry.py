"""The bundled models' names, and how a `--model` argument resolves to a model folder (at the CLI/config edge).

Two models ship with Switchyard, trained by `switchyard train-default` (the separate
`training` package) on a corpus it generates: `switchyard-chat` (the main model) and `switchyard-chat-draft` (a much smaller
model with the same tokenizer, for speculative decoding); `switchyard-chat-speculator` (look-ahead heads on the
main model's hidden state, also for speculative decoding) is trained by `switchyard train-speculator`. Anything else given as `--model` must be a Hugging
Face model folder.

This module imports nothing heavy: the CLI resolves model names before it loads torch.
"""

from __future__ import annotations

from pathlib import Path

from switchyard.errors import ModelLoadError

MAIN_MODEL = "switchyard-chat"
DRAFT_MODEL = "switchyard-chat-draft"
SPECULATOR_MODEL = "switchyard-chat-speculator"
BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
"""Where the bundled weights ship, inside the installed package (train-default writes them here)."""

BUNDLED_MODELS: dict[str, Path] = {
    MAIN_MODEL: BUNDLED_DIR / MAIN_MODEL,
    DRAFT_MODEL: BUNDLED_DIR / DRAFT_MODEL,
    SPECULATOR_MODEL: BUNDLED_DIR / SPECULATOR_MODEL,
}


class ModelNotFoundError(ModelLoadError):
    """`--model` names neither a bundled model nor an existing folder."""


class BundledModelNotBuiltError(ModelLoadError):
    """A bundled model is named but its weights have not been trained into the package folder yet."""


def default_speculative_model(model: str, method: str) -> str | None:
    """The bundled draft model (method "draft") or speculator (method "speculator") for the bundled main model;
    None for other models, which need --speculative-model."""
    if model != MAIN_MODEL:
        return None
    return SPECULATOR_MODEL if method == "speculator" else DRAFT_MODEL


def is_built(folder: Path) -> bool:
    """A model folder counts as built once it has its config and weights."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def resolve_model(name_or_path: str | Path) -> Path:
    """Map a bundled model name or a model folder path to the folder to load.

    A bundled name wins over a relative folder of the same name, as users expect `--model switchyard-chat` to
    mean the bundled model wherever they run it.
    """
    name = str(name_or_path)
    if name in BUNDLED_MODELS:
        folder = BUNDLED_MODELS[name]
        if not is_built(folder):
            raise BundledModelNotBuiltError(
                f"bundled model {name!r} is not built yet; run `switchyard train-default` to train it "
                "(about 90 minutes on 2 CPU cores), or use a Hugging Face model folder instead",
                str(folder),
            )
        return folder
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path.resolve()
    raise ModelNotFoundError(
        f"no model folder at {name!r}; give a Hugging Face model folder or a bundled model name "
        f"({', '.join(BUNDLED_MODELS)})"
    )


__all__ = [
    "BUNDLED_DIR",
    "BUNDLED_MODELS",
    "DRAFT_MODEL",
    "MAIN_MODEL",
    "SPECULATOR_MODEL",
    "BundledModelNotBuiltError",
    "ModelNotFoundError",
    "default_speculative_model",
    "is_built",
    "resolve_model",
]
