"""Hybrid retrieval's fusion: cosine breaks reciprocal-rank ties; the weighted (convex) fusion weighs scores.

The regression case (issue 55, item 10): three short notes; the kettle note is first by BM25 ("water" twice)
and second by meaning, the hydration note the other way round, so reciprocal rank fusion tied them and the
kettle note, ingested first, won on order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.agents.rag.chunking import Chunk
from switchyard.agents.rag.fusion import Candidates, FusionConfig, FusionMethod, fuse
from switchyard.agents.rag.store import RagStore

NOTES = [
    ("kettle.md", "Kettle note: boil fresh water only, and never fill the water above the max line."),
    (
        "hydration.md",
        "Adults should drink about two litres of fluids over the course of a day, more in hot weather or "
        "during exercise.",
    ),
    ("garden.md", "The tomato beds are weeded on Saturdays."),
]
QUESTION = "how much water do I need a day"


def tied() -> Candidates:
    """Chunk 1 first by keywords, chunk 2 first by meaning: equal reciprocal ranks."""
    return Candidates(
        vector_ids=[2, 1, 3], keyword_scores={1: 0.69, 2: 0.43}, cosine={1: 0.24, 2: 0.58, 3: 0.1}
    )


def test_convex_fusion_weighs_scores_not_ranks() -> None:
    fused = fuse(tied(), FusionConfig(method=FusionMethod.CONVEX, vector_weight=0.7))
    assert [cid for cid, _ in fused] == [2, 1, 3]
    scores = dict(fused)
    assert scores[2] == pytest.approx(0.7 * 1.0 + 0.3 * 0.43 / 0.69)
    assert scores[1] == pytest.approx(0.7 * (0.24 - 0.1) / 0.48 + 0.3 * 1.0)
    assert scores[3] == pytest.approx(0.0)
    keyword_only = fuse(tied(), FusionConfig(method=FusionMethod.CONVEX, vector_weight=0.0))
    assert [cid for cid, _ in keyword_only][:2] == [1, 2]


def test_rrf_ties_are_broken_by_cosine_not_by_insertion_order() -> None:
    assert FusionConfig().method is FusionMethod.RRF
    fused = fuse(tied(), FusionConfig())
    assert fused[0][1] == fused[1][1]  # the tie itself
    assert [cid for cid, _ in fused] == [2, 1, 3]


def test_weights_are_checked() -> None:
    with pytest.raises(ValueError, match="vector_weight"):
        FusionConfig(vector_weight=1.5)
    assert fuse(Candidates([], {}, {}), FusionConfig()) == []


@pytest.mark.parametrize("method", [FusionMethod.CONVEX, FusionMethod.RRF])
def test_the_semantically_right_note_beats_a_keyword_tie(
    tmp_path: Path, minilm, method: FusionMethod
) -> None:  # type: ignore[no-untyped-def]
    store = RagStore(minilm, tmp_path / "rag.db", fusion=FusionConfig(method=method))
    for source, text in NOTES:  # the kettle note first: the lowest chunk id won RRF's ties
        store.add_chunks(source, source, [Chunk(text, "", None, 0)], "notes")
    passages = store.query(QUESTION, "notes", k=3)
    by_source = {p.source: p for p in passages}
    kettle, hydration = by_source["kettle.md"], by_source["hydration.md"]
    assert (kettle.keyword_rank, kettle.vector_rank) == (1, 2)
    assert (hydration.keyword_rank, hydration.vector_rank) == (2, 1)
    assert passages[0].source == "hydration.md"
    assert passages[0].score >= passages[1].score
    store.close()
