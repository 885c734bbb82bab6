"""How hybrid retrieval merges its two rankings: reciprocal rank fusion with cosine breaking ties, or a
weighted (convex) combination of normalised scores.

Plain reciprocal rank fusion left exact ties to insertion order: a chunk first by keywords and second by meaning
ties one second by keywords and first by meaning, and a kettle note mentioning "water" beat the passage that
answered the question. Every candidate of either list now has a cosine similarity to the query (the store
computes it for keyword-only ones), and ties go to the higher cosine, then the lower id. The convex
combination (Bruch et al., "An Analysis of Fusion Functions for Hybrid Retrieval", 2023) mixes the cosine,
min-max normalised over the candidates, with BM25 divided by the best BM25, by `vector_weight`. Measured on
Cranfield (BENCHMARKS.md, "RAG retrieval quality"): RRF with the cosine tie-break 0.419 nDCG@10, convex
w=0.7 0.414, plain RRF 0.417, so RRF with the tie-break is the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

RRF_K = 60
"""Reciprocal rank fusion constant (Cormack et al. 2009): score = Σ 1 / (RRF_K + rank)."""


class FusionMethod(StrEnum):
    RRF = "rrf"
    """Reciprocal rank fusion, ties broken by cosine (the default)."""
    CONVEX = "convex"
    """Weighted sum of normalised cosine and BM25 scores."""


@dataclass(frozen=True)
class FusionConfig:
    method: FusionMethod = FusionMethod.RRF
    vector_weight: float = 0.7
    """Share of the cosine score in a convex fusion; the rest is BM25's."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.vector_weight <= 1.0:
            raise ValueError(f"vector_weight must be in [0, 1], got {self.vector_weight}")


@dataclass(frozen=True)
class Candidates:
    """What both searches found for one query."""

    vector_ids: Sequence[int]
    """Chunk ids by cosine similarity, best first."""
    keyword_scores: Mapping[int, float]
    """BM25 score (higher is better, > 0) of each chunk the keyword search found, in its order."""
    cosine: Mapping[int, float]
    """Cosine similarity to the query of every candidate of either list."""


def fuse(candidates: Candidates, config: FusionConfig) -> list[tuple[int, float]]:
    """Candidates with their fused score (higher is better), best first."""
    ids = list(dict.fromkeys([*candidates.vector_ids, *candidates.keyword_scores]))
    if config.method is FusionMethod.RRF:
        scores = _rrf(candidates)
    else:
        scores = _convex(ids, candidates, config.vector_weight)
    cosine = candidates.cosine
    ids.sort(key=lambda cid: (-scores[cid], -cosine.get(cid, -1.0), cid))
    return [(cid, scores[cid]) for cid in ids]


def _rrf(candidates: Candidates) -> dict[int, float]:
    scores: dict[int, float] = {}
    for ranking in (candidates.vector_ids, list(candidates.keyword_scores)):
        for rank, cid in enumerate(ranking, 1):
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (RRF_K + rank)
    return scores


def _convex(ids: list[int], candidates: Candidates, vector_weight: float) -> dict[int, float]:
    cosines = [candidates.cosine.get(cid, -1.0) for cid in ids]
    low, high = min(cosines, default=0.0), max(cosines, default=0.0)
    spread = high - low
    best_bm25 = max(candidates.keyword_scores.values(), default=0.0)
    scores: dict[int, float] = {}
    for cid, cosine in zip(ids, cosines, strict=True):
        vector = (cosine - low) / spread if spread > 0 else 1.0
        keyword = candidates.keyword_scores.get(cid, 0.0) / best_bm25 if best_bm25 > 0 else 0.0
        scores[cid] = vector_weight * vector + (1.0 - vector_weight) * keyword
    return scores
