"""Reads documents for ingestion: plain text, Markdown and PDF (pypdf), each into (page, text) blocks.

Errors are `DocumentError`s naming the file, so one bad file is reported and the rest of an ingest goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from switchyard.errors import SwitchyardError
from switchyard.extras import require_extra

TEXT_SUFFIXES = (".txt", ".text", ".rst")
MARKDOWN_SUFFIXES = (".md", ".markdown")
PDF_SUFFIXES = (".pdf",)
SUPPORTED_SUFFIXES = TEXT_SUFFIXES + MARKDOWN_SUFFIXES + PDF_SUFFIXES


class DocumentError(SwitchyardError):
    """A file cannot be ingested (unsupported type, empty, malformed PDF, no extractable text)."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path = str(path)
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class PageText:
    """Text of one page (PDF) or of the whole file (page None)."""

    text: str
    page: int | None = None


@dataclass(frozen=True)
class LoadedDocument:
    source: str
    kind: str
    """"text", "markdown" or "pdf"."""
    pages: list[PageText]
    raw: bytes
    """The file's bytes (for the content hash that detects re-ingestion)."""


def load_document(path: str | Path) -> LoadedDocument:
    """Read one file; raises DocumentError with a message a user can act on."""
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DocumentError(file, f"unsupported file type {suffix or '(none)'}; expected .txt, .md or .pdf")
    try:
        raw = file.read_bytes()
    except OSError as error:
        raise DocumentError(file, f"cannot read: {error.strerror or error}") from error
    if not raw.strip():
        raise DocumentError(file, "file is empty")
    if suffix in PDF_SUFFIXES:
        pages = _pdf_pages(file, raw)
        kind = "pdf"
    else:
        text = raw.decode("utf-8", errors="replace")
        pages = [PageText(text)]
        kind = "markdown" if suffix in MARKDOWN_SUFFIXES else "text"
    if not any(page.text.strip() for page in pages):
        raise DocumentError(file, "no extractable text (a scanned PDF needs OCR first)")
    return LoadedDocument(source=str(file), kind=kind, pages=pages, raw=raw)


def _pdf_pages(file: Path, raw: bytes) -> list[PageText]:
    import io

    with require_extra("rag"):
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError

    if not raw.lstrip().startswith(b"%PDF-"):
        raise DocumentError(file, "not a PDF (missing %PDF- header)")
    try:
        reader = PdfReader(io.BytesIO(raw), strict=False)
        if reader.is_encrypted:
            raise DocumentError(file, "PDF is encrypted")
        return [PageText(page.extract_text() or "", number) for number, page in enumerate(reader.pages, 1)]
    except DocumentError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as error:
        raise DocumentError(file, f"malformed PDF: {type(error).__name__}: {error}") from error
