"""`switchyard rag ingest|query|list` through the top-level CLI, state under $SWITCHYARD_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest
from rag_corpus import write_corpus

from switchyard.cli import main


def test_rag_cli_ingest_and_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], minilm
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SWITCHYARD_HOME", str(tmp_path / "home"))
    docs = tmp_path / "docs"
    write_corpus(docs)
    (docs / "empty.txt").write_text("")
    assert main(["rag", "ingest", str(docs), "--collection", "handbook"]) == 1  # one file failed
    out, err = capsys.readouterr()
    assert "ingested 5 files" in out and "empty.txt: file is empty" in err
    assert (tmp_path / "home" / "rag.db").is_file()
    assert main(["rag", "query", "minimum password length", "--collection", "handbook", "-k", "2"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("[1] ") and "security.pdf, p. 1" in out and "14 characters" in out
    assert main(["rag", "list"]) == 0
    assert "handbook\t17 chunks" in capsys.readouterr().out
    assert main(["rag", "query", "x", "--collection", "bad name"]) == 2
