"""Ingestion: Markdown, text and PDF into a collection; dedup and re-ingest; bad files reported, not fatal."""

from __future__ import annotations

from pathlib import Path

import pytest
from rag_corpus import write_corpus

from switchyard.agents.rag.chunking import ChunkingConfig, chunk_document
from switchyard.agents.rag.loaders import DocumentError, LoadedDocument, PageText, load_document
from switchyard.agents.rag.store import RagStore
from switchyard.agents.sqlite_db import StoreError


def test_pdf_pages_are_read(tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "docs")
    document = load_document(files[-1])
    assert document.kind == "pdf" and [p.page for p in document.pages] == [1, 2, 3, 4]
    assert "14 characters" in document.pages[0].text


def test_markdown_chunks_follow_headings_with_overlap() -> None:
    text = "# Guide\n\nIntro paragraph.\n\n## Setup\n\n" + "\n\n".join(
        f"Step {i} " + "word " * 30 for i in range(6)
    )
    document = LoadedDocument("g.md", "markdown", [PageText(text)], text.encode())
    chunks = chunk_document(document, ChunkingConfig(max_chars=400, overlap_chars=200))
    assert chunks[0].heading == "Guide" and chunks[0].text == "Intro paragraph."
    setup = [c for c in chunks if c.heading == "Guide > Setup"]
    assert len(setup) >= 2 and all(len(c.text) <= 400 for c in setup)
    first_tail = setup[0].text.split("\n\n")[-1]
    assert setup[1].text.startswith(first_tail)  # overlap: the next chunk repeats the last paragraph
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_ingest_reports_bad_files_and_continues(tmp_path: Path, minilm) -> None:  # type: ignore[no-untyped-def]
    docs = tmp_path / "docs"
    write_corpus(docs)
    (docs / "empty.md").write_text("")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> garbage")
    (docs / "fake.pdf").write_bytes(b"this is not a pdf")
    store = RagStore(minilm, tmp_path / "rag.db")
    lines: list[str] = []

    report = store.ingest([docs, tmp_path / "missing.txt"], "handbook", progress=lines.append)

    assert report.files == 5 and report.chunks_added == 17  # 12 sections, 4 PDF pages, 1 text chunk
    failed = {Path(e.path).name: str(e) for e in report.errors}
    assert set(failed) == {"empty.md", "broken.pdf", "fake.pdf", "missing.txt"}
    assert "empty" in failed["empty.md"] and "not a PDF" in failed["fake.pdf"]
    assert "PDF" in failed["broken.pdf"] or "no extractable text" in failed["broken.pdf"]
    assert "cannot read" in failed["missing.txt"]
    assert any(line.startswith("error:") for line in lines)
    assert store.collections() == {"handbook": 17}

    again = store.ingest([docs / "pumps.md"], "handbook")
    assert again.unchanged_files == 1 and again.chunks_added == 0
    copy = docs / "pumps-copy.md"
    copy.write_text((docs / "pumps.md").read_text())
    dup = store.ingest([copy], "handbook")
    assert dup.chunks_added == 0 and dup.duplicate_chunks == 4  # same passages under another name
    (docs / "pumps.md").write_text(
        (docs / "pumps.md").read_text() + "\n## Warranty\nTwo years of warranty.\n"
    )
    changed = store.ingest([docs / "pumps.md"], "handbook")
    assert changed.chunks_added == 5 and store.collections() == {"handbook": 18}

    store.ingest([docs / "garden.md"], "garden-only")
    assert {Path(p.source).name for p in store.query("pump seal bearing compost", "garden-only", k=10)} == {
        "garden.md"
    }  # neither search leaves its collection
    assert store.collections() == {"handbook": 18, "garden-only": 4}


def test_bad_inputs_raise_clear_errors(tmp_path: Path, minilm) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "x.docx").write_bytes(b"PK")
    with pytest.raises(DocumentError, match="unsupported file type"):
        load_document(tmp_path / "x.docx")
    (tmp_path / "blank.txt").write_text("  \n\n ")
    with pytest.raises(DocumentError, match="empty"):
        load_document(tmp_path / "blank.txt")
    with pytest.raises(StoreError, match="invalid collection"):
        RagStore(minilm, tmp_path / "rag.db").query("x", "bad name!")
