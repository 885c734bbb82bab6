"""Attention sinks (StreamingLLM) over the paged cache: the model's own attention until the window slides,
positions within the cache after (checked against transformers on the compressed sequence), the same logits
however a step is laid out, and the receptive field a window implies."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_factory import build_hf_model
from paged_runner import PagedRunner

from switchyard.models import load_model
from switchyard.models.config import ModelArchConfig, with_long_context

SINKS, WINDOW = 4, 12
TRAINED = 64


pytestmark = pytest.mark.usefixtures("single_thread")  # tests/models/conftest.py


def tokens(length: int, seed: int) -> list[int]:
    return torch.randint(0, 320, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def streaming(folder: Path, sinks: int = SINKS, window: int = WINDOW):  # type: ignore[no-untyped-def]
    config = with_long_context(ModelArchConfig.from_folder(folder), window, sinks)
    return load_model(folder, config=config, max_positions=4 * TRAINED)


def last_logits(model, sequence: list[int], chunk: int | None = None, seed: int = 0) -> torch.Tensor:  # type: ignore[no-untyped-def]
    runner = PagedRunner(model, num_blocks=512, seed=seed)
    return runner.prefill([runner.add(sequence)], chunk_size=chunk)[0]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_before_the_window_slides_it_is_the_model(arch: str, tmp_path: Path) -> None:
    """Up to sinks + window tokens nothing is evicted: logits equal the plain model's and transformers'."""
    hf = build_hf_model(arch, tmp_path, initializer_range=0.1, max_position_embeddings=TRAINED)
    sequence = tokens(SINKS + WINDOW, seed=1)
    expected = hf(torch.tensor([sequence])).logits[0, -1]
    assert (last_logits(streaming(tmp_path), sequence) - expected).abs().max().item() < 1e-4
    assert (last_logits(load_model(tmp_path), sequence) - expected).abs().max().item() < 1e-4


@pytest.mark.parametrize("length", [SINKS + WINDOW + 1, 3 * TRAINED])
def test_positions_are_within_the_cache(length: int, tmp_path: Path) -> None:
    """With one layer, a query's output depends only on the keys it sees, so StreamingLLM's definition can be
    checked directly: the logits at the end of a long stream equal transformers' on the compressed sequence,
    the sinks then the last `window` tokens at positions 0 .. sinks + window - 1. The stream runs to 3x the
    trained context; transformers never sees more than sinks + window tokens."""
    hf = build_hf_model(
        "llama", tmp_path, initializer_range=0.1, max_position_embeddings=TRAINED, num_hidden_layers=1
    )
    sequence = tokens(length, seed=2)
    compressed = sequence[:SINKS] + sequence[-WINDOW:]
    expected = hf(torch.tensor([compressed])).logits[0, -1]
    assert (last_logits(streaming(tmp_path), sequence) - expected).abs().max().item() < 1e-4
    # The sinks matter: without them (a window of the same size) the logits differ.
    windowed = with_long_context(ModelArchConfig.from_folder(tmp_path), WINDOW, 0)
    plain_window = load_model(tmp_path, config=windowed, max_positions=4 * TRAINED)
    assert (last_logits(plain_window, sequence) - expected).abs().max().item() > 1e-2


def test_prefill_chunks_and_decodes_agree(tmp_path: Path) -> None:
    """A 150-token stream (past the trained 64) computed in one chunk, in chunks of 7 and token by token after
    a 30-token prompt ends with the same logits."""
    build_hf_model("qwen3", tmp_path, initializer_range=0.1, max_position_embeddings=TRAINED)
    model = streaming(tmp_path)
    sequence = tokens(150, seed=3)
    one_shot = last_logits(model, sequence)
    assert (last_logits(model, sequence, chunk=7, seed=1) - one_shot).abs().max().item() < 1e-5
    runner = PagedRunner(model, num_blocks=512, seed=2)
    seq = runner.add(sequence[:30])
    runner.prefill([seq])
    for token in sequence[30:]:
        decoded = runner.decode({seq: token})[seq]
    assert (decoded - one_shot).abs().max().item() < 1e-5


def test_tokens_outside_the_receptive_field_do_not_matter(tmp_path: Path) -> None:
    """Each of 2 layers reaches back window - 1 tokens (and to the sinks), so changing the token at position 40
    cannot change the logits past 40 + 2 * (window - 1); with full attention it does."""
    build_hf_model("llama", tmp_path, initializer_range=0.1, max_position_embeddings=TRAINED)
    model = streaming(tmp_path)
    sequence = tokens(40 + 2 * (WINDOW - 1) + 2, seed=4)  # the last position is one past the reach
    changed = list(sequence)
    changed[40] = (changed[40] + 1) % 320
    assert (last_logits(model, sequence) - last_logits(model, changed)).abs().max().item() < 1e-5
    plain = load_model(tmp_path)
    assert (last_logits(plain, sequence) - last_logits(plain, changed)).abs().max().item() > 1e-3


@pytest.mark.parametrize(
    ("window", "sinks", "message"),
    [(None, 4, "needs --sliding-window"), (60, 8, "max_position_embeddings"), (0, 0, ">= 1")],
)
def test_bad_long_context_settings_are_refused(
    window: int | None, sinks: int, message: str, tmp_path: Path
) -> None:
    build_hf_model("llama", tmp_path, max_position_embeddings=TRAINED)
    with pytest.raises(ValueError, match=message):
        with_long_context(ModelArchConfig.from_folder(tmp_path), window, sinks)


def test_a_model_with_its_own_window_refuses_another(tmp_path: Path) -> None:
    build_hf_model("mistral", tmp_path, sliding_window=8)
    with pytest.raises(ValueError, match="has its own sliding window"):
        with_long_context(ModelArchConfig.from_folder(tmp_path), 16, 4)
