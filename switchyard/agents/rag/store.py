"""Document retrieval (RAG): ingest files into named collections, retrieve ranked passages with sources.

Retrieval is hybrid: a sqlite-vec nearest-neighbour search over MiniLM embeddings finds paraphrases, an FTS5
BM25 search finds exact names and numbers, and reciprocal rank fusion with cosine similarity breaking ties
(`fusion.py`) merges the two lists. Everything lives in one SQLite file under `$SWITCHYARD_HOME/rag.db`.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.agents.rag.chunking import Chunk, ChunkingConfig, chunk_document
from switchyard.agents.rag.embeddings import Embedder, to_blob
from switchyard.agents.rag.fusion import Candidates, FusionConfig, fuse
from switchyard.agents.rag.loaders import SUPPORTED_SUFFIXES, DocumentError, LoadedDocument, load_document
from switchyard.agents.sqlite_db import StoreError, connect
from switchyard.home import switchyard_home

_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_WORD = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "should",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)
"""Left out of keyword queries: they match nearly every chunk, cost BM25 time and add no signal."""


def default_rag_path() -> Path:
    return switchyard_home() / "rag.db"


@dataclass(frozen=True)
class Passage:
    """One retrieved passage; `n` is its citation number ([n]) in this result list."""

    n: int
    text: str
    source: str
    position: int
    heading: str
    page: int | None
    score: float
    """Fused score (higher is better; `FusionConfig` says how)."""
    vector_rank: int | None = None
    keyword_rank: int | None = None
    chunk_id: int = 0

    def citation(self) -> str:
        """Human-readable source: path, page and heading."""
        parts = [self.source]
        if self.page is not None:
            parts.append(f"p. {self.page}")
        if self.heading:
            parts.append(f"§ {self.heading}")
        return ", ".join(parts)


@dataclass
class IngestReport:
    files: int = 0
    chunks_added: int = 0
    duplicate_chunks: int = 0
    unchanged_files: int = 0
    errors: list[DocumentError] = field(default_factory=list)
    seconds: float = 0.0


class RagStore:
    """Named collections of chunked, embedded documents in SQLite (FTS5 + sqlite-vec)."""

    def __init__(
        self,
        embedder: Embedder,
        path: str | os.PathLike[str] | None = None,
        chunking: ChunkingConfig | None = None,
        fusion: FusionConfig | None = None,
    ) -> None:
        self.embedder = embedder
        self.path = Path(path) if path is not None else default_rag_path()
        self.chunking = chunking or ChunkingConfig()
        self.fusion = fusion or FusionConfig()
        self._conn = connect(self.path, vectors=True)
        self._conn.executescript(
            f"""
            CREATE TABLE IF NOT EXISTS rag_documents (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                collection TEXT NOT NULL,
                source TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                ingested_at REAL NOT NULL,
                UNIQUE(collection, source)
            );
            CREATE TABLE IF NOT EXISTS rag_chunks (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                collection TEXT NOT NULL,
                document_id INTEGER NOT NULL REFERENCES rag_documents(id) ON DELETE CASCADE,
                position INTEGER NOT NULL,
                heading TEXT NOT NULL,
                page INTEGER,
                text TEXT NOT NULL,
                text_hash TEXT NOT NULL,
                collection_key TEXT NOT NULL,
                UNIQUE(collection, text_hash)
            );
            CREATE VIRTUAL TABLE IF NOT EXISTS rag_fts USING fts5(
                text, heading, collection_key,
                content='rag_chunks', content_rowid='id', tokenize='porter unicode61'
            );
            CREATE TRIGGER IF NOT EXISTS rag_chunks_ai AFTER INSERT ON rag_chunks BEGIN
                INSERT INTO rag_fts(rowid, text, heading, collection_key)
                VALUES (new.id, new.text, new.heading, new.collection_key);
            END;
            CREATE TRIGGER IF NOT EXISTS rag_chunks_ad AFTER DELETE ON rag_chunks BEGIN
                INSERT INTO rag_fts(rag_fts, rowid, text, heading, collection_key)
                VALUES ('delete', old.id, old.text, old.heading, old.collection_key);
            END;
            CREATE VIRTUAL TABLE IF NOT EXISTS rag_vectors USING vec0(
                collection TEXT PARTITION KEY,
                embedding float[{embedder.dim}] distance_metric=cosine
            );
            """
        )

    # Ingestion

    def ingest(
        self,
        paths: Iterable[str | os.PathLike[str]],
        collection: str,
        progress: Callable[[str], None] | None = None,
    ) -> IngestReport:
        """Ingest files (folders are walked for .txt/.md/.pdf); a failing file is recorded, not fatal.

        A file already ingested with the same bytes is skipped; a changed one replaces its old chunks.
        Chunks whose normalised text is already in the collection are skipped (deduplication).
        """
        _check_collection(collection)
        report = IngestReport()
        start = time.perf_counter()
        for file in expand_paths(paths):
            try:
                document = load_document(file)
            except DocumentError as error:
                report.errors.append(error)
                if progress:
                    progress(f"error: {error}")
                continue
            report.files += 1
            added, duplicates, unchanged = self.add_document(document, collection)
            report.chunks_added += added
            report.duplicate_chunks += duplicates
            report.unchanged_files += int(unchanged)
            if progress:
                state = "unchanged" if unchanged else f"{added} chunks ({duplicates} duplicate)"
                progress(f"{document.source}: {state}")
        report.seconds = time.perf_counter() - start
        return report

    def add_document(self, document: LoadedDocument, collection: str) -> tuple[int, int, bool]:
        """Chunk, embed and store one loaded document; returns (chunks added, duplicates, unchanged)."""
        _check_collection(collection)
        digest = hashlib.sha256(document.raw).hexdigest()
        row = self._conn.execute(
            "SELECT id, sha256 FROM rag_documents WHERE collection = ? AND source = ?",
            (collection, document.source),
        ).fetchone()
        if row is not None and row[1] == digest:
            return 0, 0, True
        chunks = chunk_document(document, self.chunking)
        return (*self.add_chunks(document.source, digest, chunks, collection, replace=row is not None), False)

    def add_chunks(
        self, source: str, digest: str, chunks: Sequence[Chunk], collection: str, replace: bool = False
    ) -> tuple[int, int]:
        """Store chunks of one source (embedding the new ones); returns (added, duplicates)."""
        if replace:
            self.delete_source(source, collection)
        hashes = [_text_hash(chunk.text) for chunk in chunks]
        seen: set[str] = set()
        fresh: list[tuple[Chunk, str]] = []
        for chunk, text_hash in zip(chunks, hashes, strict=True):
            if text_hash in seen:
                continue
            seen.add(text_hash)
            fresh.append((chunk, text_hash))
        existing = self._existing_hashes(collection, [h for _, h in fresh])
        fresh = [(c, h) for c, h in fresh if h not in existing]
        vectors = self.embedder.embed([_embedding_text(c) for c, _ in fresh])
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            document_id = self._conn.execute(
                "INSERT INTO rag_documents(collection, source, sha256, ingested_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(collection, source) DO UPDATE SET sha256 = excluded.sha256, "
                "ingested_at = excluded.ingested_at RETURNING id",
                (collection, source, digest, time.time()),
            ).fetchone()[0]
            key = _collection_key(collection)
            for index, (chunk, text_hash) in enumerate(fresh):
                chunk_id = self._conn.execute(
                    "INSERT INTO rag_chunks(collection, document_id, position, heading, page, text, text_hash, "
                    "collection_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        collection,
                        document_id,
                        chunk.position,
                        chunk.heading,
                        chunk.page,
                        chunk.text,
                        text_hash,
                        key,
                    ),
                ).lastrowid
                self._conn.execute(
                    "INSERT INTO rag_vectors(rowid, collection, embedding) VALUES (?, ?, ?)",
                    (chunk_id, collection, to_blob(vectors[index])),
                )
        return len(fresh), len(chunks) - len(fresh)

    def _existing_hashes(self, collection: str, hashes: list[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(hashes), 500):
            batch = hashes[start : start + 500]
            marks = ",".join("?" * len(batch))
            found.update(
                r[0]
                for r in self._conn.execute(
                    f"SELECT text_hash FROM rag_chunks WHERE collection = ? AND text_hash IN ({marks})",
                    (collection, *batch),
                )
            )
        return found

    def delete_source(self, source: str, collection: str) -> int:
        """Remove one source's chunks from a collection; returns how many chunks were removed."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            ids = [
                (r[0],)
                for r in self._conn.execute(
                    "SELECT c.id FROM rag_chunks c JOIN rag_documents d ON d.id = c.document_id "
                    "WHERE d.collection = ? AND d.source = ?",
                    (collection, source),
                )
            ]
            self._conn.executemany("DELETE FROM rag_vectors WHERE rowid = ?", ids)
            self._conn.executemany("DELETE FROM rag_chunks WHERE id = ?", ids)
            self._conn.execute(
                "DELETE FROM rag_documents WHERE collection = ? AND source = ?", (collection, source)
            )
        return len(ids)

    def collections(self) -> dict[str, int]:
        """Collection name → chunk count."""
        rows = self._conn.execute("SELECT collection, count(*) FROM rag_chunks GROUP BY collection")
        return {str(r[0]): int(r[1]) for r in rows}

    # Retrieval

    def query(self, text: str, collection: str, k: int = 5, candidates: int = 50) -> list[Passage]:
        """The `k` best passages for `text`: vector and keyword rankings (top `candidates` each) fused."""
        _check_collection(collection)
        if k <= 0 or not text.strip():
            return []
        found = self.candidates(text, collection, candidates)
        fused = fuse(found, self.fusion)[:k]
        if not fused:
            return []
        best = [cid for cid, _ in fused]
        marks = ",".join("?" * len(best))
        rows = {
            r[0]: r
            for r in self._conn.execute(
                "SELECT c.id, c.text, d.source, c.position, c.heading, c.page FROM rag_chunks c "
                f"JOIN rag_documents d ON d.id = c.document_id WHERE c.id IN ({marks})",
                best,
            )
        }
        vector_rank = {cid: rank for rank, cid in enumerate(found.vector_ids, 1)}
        keyword_rank = {cid: rank for rank, cid in enumerate(found.keyword_scores, 1)}
        return [
            Passage(
                n=n,
                text=rows[cid][1],
                source=rows[cid][2],
                position=rows[cid][3],
                heading=rows[cid][4],
                page=rows[cid][5],
                score=score,
                vector_rank=vector_rank.get(cid),
                keyword_rank=keyword_rank.get(cid),
                chunk_id=cid,
            )
            for n, (cid, score) in enumerate(fused, 1)
        ]

    def candidates(self, text: str, collection: str, limit: int = 50) -> Candidates:
        """The top `limit` chunks by cosine and by BM25, with the cosine of every one of them."""
        _check_collection(collection)
        blob = to_blob(self.embedder.embed([text])[0])
        vector = self._vector_search(blob, collection, limit)
        keyword = self._keyword_search(text, collection, limit)
        cosine = {cid: 1.0 - distance for cid, distance in vector}
        missing = [cid for cid in keyword if cid not in cosine]
        if missing:
            marks = ",".join("?" * len(missing))
            cosine.update(
                (int(r[0]), 1.0 - float(r[1]))
                for r in self._conn.execute(
                    f"SELECT rowid, vec_distance_cosine(embedding, ?) FROM rag_vectors WHERE rowid IN ({marks})",
                    (blob, *missing),
                )
            )
        return Candidates(vector_ids=[cid for cid, _ in vector], keyword_scores=keyword, cosine=cosine)

    def _vector_search(self, blob: bytes, collection: str, limit: int) -> list[tuple[int, float]]:
        """(chunk id, cosine distance), nearest first."""
        rows = self._conn.execute(
            "SELECT rowid, distance FROM rag_vectors WHERE embedding MATCH ? AND k = ? AND collection = ? "
            "ORDER BY distance",
            (blob, limit, collection),
        )
        return [(int(r[0]), float(r[1])) for r in rows]

    def _keyword_search(self, text: str, collection: str, limit: int) -> dict[int, float]:
        """Chunk id -> BM25 score (higher is better), best first."""
        words = [w for w in dict.fromkeys(w.lower() for w in _WORD.findall(text)) if w not in STOPWORDS]
        if not words:
            return {}
        terms = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        # The collection is an indexed token of its own column, so the filter is part of the index lookup;
        # filtering on a column read from rag_chunks cost a row lookup per match (seconds at 10k chunks).
        # Weight 0 keeps that token out of the BM25 score. FTS5's bm25() is negative, lower is better.
        rows = self._conn.execute(
            "SELECT rowid, -bm25(rag_fts, 1.0, 1.0, 0.0) AS score FROM rag_fts WHERE rag_fts MATCH ? "
            "ORDER BY score DESC LIMIT ?",
            (f'collection_key : "{_collection_key(collection)}" AND ({terms})', limit),
        )
        return {int(r[0]): float(r[1]) for r in rows}

    def close(self) -> None:
        self._conn.close()


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files named, plus supported files found under named folders (sorted); missing paths stay in the
    list so that loading reports them."""
    files: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            files.extend(
                sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES)
            )
        else:
            files.append(path)
    return files


def _check_collection(name: str) -> None:
    if not _COLLECTION_NAME.match(name):
        raise StoreError(f"invalid collection name {name!r}: use letters, digits, '_', '-' or '.' (max 64)")


def _collection_key(collection: str) -> str:
    """One alphanumeric token per collection for the FTS index (names may hold '-' and '.')."""
    return "c" + hashlib.sha1(collection.encode()).hexdigest()[:20]


def _text_hash(text: str) -> str:
    return hashlib.sha256(" ".join(text.lower().split()).encode()).hexdigest()


def _embedding_text(chunk: Chunk) -> str:
    return f"{chunk.heading}\n{chunk.text}" if chunk.heading else chunk.text
