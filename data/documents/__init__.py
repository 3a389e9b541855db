"""Documents -> chunks: PDF pages (text, tables as markdown, pictures as text), and .txt / .md / .html files.

``load_document(path)`` reads one file into ``Chunk``s (``chunks.py``: the chunk, its stable id and the
structure-aware chunker); PDFs go through ``pdf.py`` (layout, tables, pictures described by ``pictures.py``), text,
markdown and HTML through ``text.py``. ``folder_documents`` lists a folder's supported files. A file that is
missing, empty, of an unsupported type, corrupt, encrypted, or yields no text raises ``DocumentError`` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragscale.data.documents.chunks import (
    DEFAULT_MAX_TOKENS,
    Block,
    Chunk,
    DocumentError,
    chunk_blocks,
    chunk_text,
    document_source,
    file_sha256,
    table_markdown,
    whitespace_tokens,
)
from ragscale.data.documents.pdf import parse_pdf
from ragscale.data.documents.pictures import OCRDescriber, PictureDescriber, VLMDescriber
from ragscale.data.documents.text import parse_text_file, text_blocks

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "SUFFIXES",
    "Block",
    "Chunk",
    "DocumentError",
    "OCRDescriber",
    "PictureDescriber",
    "VLMDescriber",
    "chunk_blocks",
    "chunk_text",
    "document_source",
    "file_sha256",
    "folder_documents",
    "load_document",
    "parse_pdf",
    "parse_text_file",
    "table_markdown",
    "text_blocks",
]

SUFFIXES = (".pdf", ".txt", ".md", ".markdown", ".html", ".htm")


def folder_documents(folder: str | Path) -> list[Path]:
    """The files under ``folder`` (recursively, sorted) with a supported suffix; hidden ones are skipped."""
    folder = Path(folder)
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file()
        and path.suffix.lower() in SUFFIXES
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )


def load_document(
    path: str | Path,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    count_tokens: Callable[[str], int] = whitespace_tokens,
    describer: PictureDescriber | None = None,
    ocr: bool = True,
) -> list[Chunk]:
    """The chunks of one file; ``DocumentError`` (naming the file) when it is missing, empty, of an unsupported
    type, corrupt, encrypted, or yields no text at all."""
    path = Path(path)
    if not path.is_file():
        raise DocumentError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DocumentError(f"{path}: unsupported file type {suffix or '(none)'!r}; supported: {', '.join(SUFFIXES)}")
    if path.stat().st_size == 0:
        raise DocumentError(f"{path}: the file is empty")
    if suffix == ".pdf":
        chunks = parse_pdf(path, max_tokens=max_tokens, count_tokens=count_tokens, describer=describer, ocr=ocr)
    else:
        chunks = parse_text_file(path, max_tokens=max_tokens, count_tokens=count_tokens)
    if not chunks:
        raise DocumentError(f"{path}: no text found (a scanned PDF without a text layer or pictures?)")
    return chunks
