"""RAG store throughput: ingest (chunks/s) and hybrid query latency (p50/p99) at 10k and 100k chunks.

Two ingest numbers are reported because they differ by orders of magnitude: the store alone (SQLite rows,
FTS5 index, sqlite-vec vectors; embeddings precomputed) and MiniLM embedding on this CPU, measured on a sample.
Query latency is end to end (embed the query with MiniLM, vector KNN + FTS5 BM25, RRF, fetch rows).

    PYTHONPATH=$PWD nice -n 15 .venv/bin/python benchmarks/rag_throughput.py --sizes 10000 100000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from switchyard.agents.rag.chunking import Chunk
from switchyard.agents.rag.embeddings import MiniLMEmbedder
from switchyard.agents.rag.store import RagStore

VOCABULARY = 20_000
"""Pseudo-words drawn with a Zipf distribution (s = 1.1), like word frequencies in real text: a few words are
in most chunks, most words in few. Queries draw from the same distribution."""


def zipf_words(rng: np.random.Generator, count: int) -> list[str]:
    ranks = rng.zipf(1.1, size=count * 4)
    ranks = ranks[ranks <= VOCABULARY][:count]
    return [f"w{int(rank)}" for rank in ranks]


class PrecomputedEmbedder:
    """Returns random unit vectors: isolates the store's cost from the model's."""

    dim = 384

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self.rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class QueryEmbedder:
    """MiniLM for queries (the real per-query cost), random vectors for bulk ingest."""

    def __init__(self, minilm: MiniLMEmbedder) -> None:
        self.minilm = minilm
        self.bulk = PrecomputedEmbedder()
        self.dim = 384

        self.last_seconds = 0.0

    def embed(self, texts: list[str]) -> np.ndarray:
        if len(texts) != 1:
            return self.bulk.embed(texts)
        start = time.perf_counter()
        vectors = self.minilm.embed(texts)
        self.last_seconds = time.perf_counter() - start
        return vectors


def synthetic_chunks(count: int, rng: np.random.Generator) -> list[Chunk]:
    return [
        Chunk(
            text=f"item {i}: " + " ".join(zipf_words(rng, 60)),
            heading=f"Section {i % 97}",
            page=None,
            position=i,
        )
        for i in range(count)
    ]


def run(size: int, minilm: MiniLMEmbedder, queries: int, folder: Path) -> dict[str, float]:
    rng = np.random.default_rng(size)
    embedder = QueryEmbedder(minilm)
    store = RagStore(embedder, folder / f"bench-{size}.db")
    chunks = synthetic_chunks(size, rng)
    start = time.perf_counter()
    per_doc = 1000
    for doc in range(0, size, per_doc):
        store.add_chunks(f"doc-{doc // per_doc}.md", f"sha{doc}", chunks[doc : doc + per_doc], "bench")
    ingest_s = time.perf_counter() - start
    latencies, store_latencies = [], []
    for _ in range(queries):
        question = " ".join(zipf_words(rng, 6))
        t0 = time.perf_counter()
        store.query(question, "bench", k=5)
        latencies.append(time.perf_counter() - t0)
        store_latencies.append(latencies[-1] - embedder.last_seconds)
    store.close()
    lat = np.array(latencies) * 1000
    store_lat = np.array(store_latencies) * 1000
    return {
        "chunks": size,
        "store_chunks_per_s": size / ingest_s,
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "store_p50_ms": float(np.percentile(store_lat, 50)),
        "store_p99_ms": float(np.percentile(store_lat, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--embed-sample", type=int, default=512, help="chunks embedded to time MiniLM")
    args = parser.parse_args()
    minilm = MiniLMEmbedder()
    minilm.embed(["warm up"])
    sample = [c.text for c in synthetic_chunks(args.embed_sample, np.random.default_rng(1))]
    t0 = time.perf_counter()
    minilm.embed(sample)
    embed_rate = len(sample) / (time.perf_counter() - t0)
    print(f"MiniLM embedding (CPU): {embed_rate:.1f} chunks/s on {len(sample)} chunks of ~60 words")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            r = run(size, minilm, args.queries, Path(tmp))
            end_to_end = 1 / (1 / r["store_chunks_per_s"] + 1 / embed_rate)
            print(
                f"{size:>7} chunks: store ingest {r['store_chunks_per_s']:.0f} chunks/s "
                f"(with MiniLM ≈ {end_to_end:.1f} chunks/s); query p50 {r['p50_ms']:.1f} ms, "
                f"p99 {r['p99_ms']:.1f} ms (without the MiniLM query embedding: p50 {r['store_p50_ms']:.1f} ms, "
                f"p99 {r['store_p99_ms']:.1f} ms)",
                flush=True,
            )


if __name__ == "__main__":
    main()
