"""Retrieval quality of the RAG store's fusion: nDCG@10 of BM25 alone, vectors alone, RRF and weighted fusion.

Runs the real store (SQLite FTS5 BM25, sqlite-vec, the bundled MiniLM) on a retrieval set in BEIR's layout
(`corpus.jsonl` with `_id`/`title`/`text`, `queries.jsonl` with `_id`/`text`, `qrels/test.tsv` with
`query-id  corpus-id  score`, graded gains) or on the Cranfield collection's original files (`--cranfield DIR`
holding cran.all.1400, cran.qry, cranqrel), one chunk per document. Every method ranks the same candidates
(top 50 by each search, as `RagStore.query` does): "rrf (old)" is the previous store's RRF with ties left
to chunk order; "convex w=x" is `fusion.py`'s weighted fusion with vector_weight x.

Usage: python benchmarks/rag_fusion_quality.py (--beir DIR | --cranfield DIR) [--write-slice DIR --slice-docs N]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from switchyard.agents.rag.chunking import Chunk
from switchyard.agents.rag.embeddings import MiniLMEmbedder
from switchyard.agents.rag.fusion import RRF_K, Candidates, FusionConfig, FusionMethod, fuse
from switchyard.agents.rag.store import RagStore

Corpus = dict[str, str]
Qrels = dict[str, dict[str, int]]
WEIGHTS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9)


def load_beir(folder: Path) -> tuple[Corpus, dict[str, str], Qrels]:
    corpus = {}
    for line in (folder / "corpus.jsonl").read_text().splitlines():
        doc = json.loads(line)
        corpus[str(doc["_id"])] = f"{doc.get('title', '')}\n{doc['text']}".strip()
    queries = {}
    for line in (folder / "queries.jsonl").read_text().splitlines():
        query = json.loads(line)
        queries[str(query["_id"])] = query["text"]
    qrels: Qrels = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(query_id, {})[doc_id] = int(score)
    return corpus, queries, qrels


def load_cranfield(folder: Path) -> tuple[Corpus, dict[str, str], Qrels]:
    """Cranfield's SMART-format files. Queries are numbered by position (the .I numbers skip; cranqrel uses
    positions); relevance codes 1 (complete answer) to 4 (minimum interest) become gains 4 to 1."""
    corpus = {}
    for record in _smart_records((folder / "cran.all.1400").read_text()):
        corpus[record["I"]] = f"{record.get('T', '')}\n{record.get('W', '')}".strip()
    queries = {
        str(position): record.get("W", "")
        for position, record in enumerate(_smart_records((folder / "cran.qry").read_text()), 1)
    }
    qrels: Qrels = {}
    for line in (folder / "cranqrel").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and 1 <= int(parts[2]) <= 4:
            qrels.setdefault(parts[0], {})[parts[1]] = 5 - int(parts[2])
    return corpus, queries, qrels


def _smart_records(text: str) -> list[dict[str, str]]:
    records: list[dict[str, str]] = []
    field = ""
    for line in text.splitlines():
        marker = re.match(r"^\.([ITABW])\b\s*(.*)$", line)
        if marker and marker.group(1) == "I":
            records.append({"I": marker.group(2).strip()})
            field = ""
        elif marker:
            field = marker.group(1)
            records[-1][field] = ""
        elif field:
            records[-1][field] += " " + line.strip()
    return [{k: " ".join(v.split()) for k, v in r.items()} for r in records]


def ndcg_at_10(ranking: list[str], gains: dict[str, int]) -> float:
    dcg = sum(gains.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:10]))
    ideal = sorted(gains.values(), reverse=True)[:10]
    best = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / best if best else 0.0


def old_rrf(candidates: Candidates) -> list[int]:
    """The store's fusion before weighted fusion: RRF, ties to the lower chunk id."""
    scores: dict[int, float] = {}
    for ranking in (candidates.vector_ids, list(candidates.keyword_scores)):
        for rank, cid in enumerate(ranking, 1):
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores, key=lambda cid: (-scores[cid], cid))


def rankings(candidates: Candidates) -> dict[str, list[int]]:
    out = {
        "bm25 alone": list(candidates.keyword_scores),
        "vectors alone": list(candidates.vector_ids),
        "rrf (old)": old_rrf(candidates),
        "rrf, cosine tie-break": [c for c, _ in fuse(candidates, FusionConfig(FusionMethod.RRF))],
    }
    for weight in WEIGHTS:
        config = FusionConfig(FusionMethod.CONVEX, vector_weight=weight)
        out[f"convex w={weight}"] = [c for c, _ in fuse(candidates, config)]
    return out


class BatchedEmbedder:
    """MiniLM with the corpus embedded up front in batches (one text at a time costs several times more)."""

    def __init__(self, model: MiniLMEmbedder) -> None:
        self.model = model
        self.known: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return self.model.dim

    def prime(self, texts: list[str]) -> None:
        for text, vector in zip(texts, self.model.embed(texts), strict=True):
            self.known[text] = vector

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self.known]
        if missing:
            self.prime(missing)
        return np.stack([self.known[t] for t in texts]) if texts else self.model.embed([])


def evaluate(corpus: Corpus, queries: dict[str, str], qrels: Qrels) -> dict[str, float]:
    """Mean nDCG@10 per method over the queries that have relevance judgments."""
    embedder = BatchedEmbedder(MiniLMEmbedder())
    start = time.perf_counter()
    embedder.prime(list(corpus.values()))
    print(f"embedded {len(corpus)} documents in {time.perf_counter() - start:.0f} s", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        store = RagStore(embedder, Path(folder) / "rag.db")
        start = time.perf_counter()
        chunk_doc: dict[int, str] = {}
        for doc_id, text in corpus.items():
            store.add_chunks(doc_id, doc_id, [Chunk(text, "", None, 0)], "eval")
        for cid, source in store._conn.execute(
            "SELECT c.id, d.source FROM rag_chunks c JOIN rag_documents d ON d.id = c.document_id"
        ):
            chunk_doc[int(cid)] = str(source)
        print(f"ingested {len(corpus)} documents in {time.perf_counter() - start:.0f} s", flush=True)
        totals: dict[str, float] = {}
        judged = [q for q in queries if qrels.get(q)]
        for query_id in judged:
            candidates = store.candidates(queries[query_id], "eval", 50)
            for method, ranking in rankings(candidates).items():
                docs = [chunk_doc[cid] for cid in ranking]
                totals[method] = totals.get(method, 0.0) + ndcg_at_10(docs, qrels[query_id])
        store.close()
    return {method: total / len(judged) for method, total in totals.items()} | {"queries": len(judged)}


def write_slice(corpus: Corpus, queries: dict[str, str], qrels: Qrels, folder: Path, docs: int) -> None:
    """A BEIR-layout slice: the first `docs` documents and the queries all of whose judged documents are
    among them."""
    kept = set(list(corpus)[:docs])
    kept_queries = [q for q in queries if qrels.get(q) and set(qrels[q]) <= kept]
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w") as out:
        for doc_id in corpus:
            if doc_id in kept:
                title, _, text = corpus[doc_id].partition("\n")
                out.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w") as out:
        for query_id in kept_queries:
            out.write(json.dumps({"_id": query_id, "text": queries[query_id]}) + "\n")
    with (folder / "qrels" / "test.tsv").open("w") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        for query_id in kept_queries:
            for doc_id, gain in qrels[query_id].items():
                out.write(f"{query_id}\t{doc_id}\t{gain}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--beir", type=Path, help="a BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels/)"
    )
    source.add_argument("--cranfield", type=Path, help="a folder with cran.all.1400, cran.qry and cranqrel")
    parser.add_argument("--write-slice", type=Path, default=None, help="also write a BEIR-layout slice here")
    parser.add_argument("--slice-docs", type=int, default=400)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    corpus, queries, qrels = load_beir(args.beir) if args.beir else load_cranfield(args.cranfield)
    if args.write_slice:
        write_slice(corpus, queries, qrels, args.write_slice, args.slice_docs)
    results = evaluate(corpus, queries, qrels)
    for method, value in results.items():
        print(f"{method:24s} {value:.4f}" if method != "queries" else f"{method:24s} {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
