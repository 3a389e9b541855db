"""What a document becomes: chunks with a stable id, and the structure-aware chunker that packs its text.

Every chunk keeps its document (the file name, cited in answers), its source (the file's resolved path: the key
that tells apart two files of one name in different folders), its page (1-based; 1 for non-PDF files), its kind
(``text``, ``table`` or ``picture``), how its text was obtained (``method``) and a stable id: a short SHA-256 of
source, page, kind, position on the page and text, so the same file always gives the same ids.

The chunker (``chunk_blocks``): a heading starts a new chunk and is never left at the end of one; paragraphs are
packed greedily up to ``max_tokens``; a section that overflows continues in a new chunk that repeats its heading;
a paragraph over the budget is split at sentences (``chunk_text``). A table becomes a markdown table
(``table_markdown``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_MAX_TOKENS = 150
"""Words per chunk by default: with a heading and a context prepended it stays under MiniLM's 256 word pieces."""


class DocumentError(ValueError):
    """A file that cannot be ingested; the message names the file and why."""


@dataclass(frozen=True)
class Chunk:
    """One retrievable piece of a document: ``document`` is the file name shown to readers, ``source`` the
    resolved path that identifies the file."""

    id: str
    document: str
    page: int
    kind: str
    text: str
    method: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def chunk_id(source: str, page: int, kind: str, position: int, text: str) -> str:
    """Stable id of a chunk: a short SHA-256 of where it is (file, page, kind, position) and what it says."""
    key = f"{source}\n{page}\n{kind}\n{position}\n{text}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def document_source(path: str | Path) -> str:
    """The key of a document: its resolved absolute path (symlinks followed), as a POSIX string."""
    return Path(path).resolve().as_posix()


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (re-ingestion compares it to skip unchanged files)."""
    with Path(path).open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def whitespace_tokens(text: str) -> int:
    """Default token count for chunking: whitespace-separated words (about 0.75 of a BPE token count)."""
    return len(text.split())


def chunk_text(text: str, max_tokens: int = 200, count_tokens: Callable[[str], int] = whitespace_tokens) -> list[str]:
    """Split ``text`` into chunks of whole paragraphs of at most ``max_tokens`` tokens.

    The chunker: paragraphs are separated by blank lines; consecutive paragraphs are packed greedily into a
    chunk while it stays within ``max_tokens``; a paragraph longer than ``max_tokens`` on its own is split into
    sentence groups (on ``.``, ``!``, ``?`` followed by whitespace) packed the same way, and a single sentence
    longer than that is cut into word windows. Whitespace inside a paragraph is collapsed.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    pieces: list[str] = []
    for paragraph in filter(None, paragraphs):
        if count_tokens(paragraph) <= max_tokens:
            pieces.append(paragraph)
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", paragraph):
            if count_tokens(sentence) <= max_tokens:
                pieces.append(sentence)
                continue
            words = sentence.split()
            window: list[str] = []
            for word in words:
                if window and count_tokens(" ".join([*window, word])) > max_tokens:
                    pieces.append(" ".join(window))
                    window = []
                window.append(word)
            if window:
                pieces.append(" ".join(window))
    chunks: list[str] = []
    current: list[str] = []
    for piece in pieces:
        joined = "\n\n".join([*current, piece])
        if current and count_tokens(joined) > max_tokens:
            chunks.append("\n\n".join(current))
            current = [piece]
        else:
            current.append(piece)
    if current:
        chunks.append("\n\n".join(current))
    return chunks


@dataclass(frozen=True)
class Block:
    """A heading or a paragraph of running text."""

    kind: str  # "heading" or "paragraph"
    text: str


def chunk_blocks(
    blocks: Sequence[Block],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    count_tokens: Callable[[str], int] = whitespace_tokens,
) -> list[str]:
    """Pack headings and paragraphs into chunks of at most ``max_tokens`` (see the module docstring)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    chunks: list[str] = []
    heading = ""
    body: list[str] = []

    def flush() -> None:
        if body:
            chunks.append("\n\n".join([heading, *body] if heading else body))
        elif heading:  # a section with no text of its own (a slide title, a heading at the page end)
            chunks.append(heading)
        body.clear()

    for block in blocks:
        text = " ".join(block.text.split())
        if not text:
            continue
        if block.kind == "heading":
            if heading and not body:  # consecutive headings: keep them together
                heading = f"{heading}\n{text}"
                continue
            flush()
            heading = text
            continue
        budget = max(1, max_tokens - (count_tokens(heading) if heading else 0))
        pieces = [text] if count_tokens(text) <= budget else chunk_text(text, budget, count_tokens)
        for piece in pieces:
            candidate = "\n\n".join([heading, *body, piece] if heading else [*body, piece])
            if body and count_tokens(candidate) > max_tokens:
                chunks.append("\n\n".join([heading, *body] if heading else body))
                body.clear()
            body.append(piece)
    flush()
    return chunks


def table_markdown(rows: Sequence[Sequence[str | None]]) -> str | None:
    """A markdown table of ``rows`` (first row = header), or None when it does not look like a table.

    Empty rows and columns are dropped; the rest must have >= 2 rows, >= 2 columns and a third of its cells
    filled.
    """
    cells = [[" ".join((cell or "").split()).replace("|", "/") for cell in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return None
    width = max(len(row) for row in cells)
    cells = [row + [""] * (width - len(row)) for row in cells]
    keep = [c for c in range(width) if any(row[c] for row in cells)]
    cells = [[row[c] for c in keep] for row in cells]
    if len(cells) < 2 or len(keep) < 2:
        return None
    filled = sum(bool(cell) for row in cells for cell in row)
    if filled < len(cells) * len(keep) / 3 or sum(sum(map(bool, row)) >= 2 for row in cells) < 2:
        return None
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + " --- |" * len(keep)]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines)
