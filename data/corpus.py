"""Corpora: plain dicts ``{"id", "title", "text"}`` built from dataset paragraphs or from a folder of files.

A passage id is ``passage_id(title, text)``: the first 16 hex digits of SHA-256 over ``title + "\\n" + text``,
so the same passage gets the same id in every run, split and dataset.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

FOLDER_SUFFIXES = (".txt", ".md")


def passage_id(title: str, text: str) -> str:
    """Stable id of a passage: a short SHA-256 of its title and text."""
    return hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()[:16]


def build_corpus(examples: Iterable[Any]) -> list[dict]:
    """The union of the examples' paragraphs, deduplicated by title + text, in first-seen order.

    ``examples`` are ``dspy.Example``s (or mappings) with a ``paragraphs`` list of ``{title, text, ...}``.
    """
    corpus: dict[str, dict] = {}
    for example in examples:
        paragraphs = example["paragraphs"] if isinstance(example, Mapping) else example.paragraphs
        for paragraph in paragraphs:
            title, text = paragraph["title"], paragraph["text"]
            pid = passage_id(title, text)
            if pid not in corpus:
                corpus[pid] = {"id": pid, "title": title, "text": text}
    return list(corpus.values())


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


def corpus_from_folder(
    path: str | Path, max_tokens: int = 200, count_tokens: Callable[[str], int] = whitespace_tokens
) -> list[dict]:
    """A corpus from the ``.txt`` / ``.md`` files under ``path`` (recursive, sorted by path), chunked by
    ``chunk_text``. A chunk's title is the file's path relative to ``path`` without suffix (for ``.md`` files,
    the first ``# heading`` when there is one); chunks are deduplicated by title + text."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"corpus folder not found: {root}")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in FOLDER_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"no {' or '.join(FOLDER_SUFFIXES)} files under {root}")
    corpus: dict[str, dict] = {}
    for file in files:
        text = file.read_text(encoding="utf-8")
        title = str(file.relative_to(root).with_suffix(""))
        if file.suffix.lower() == ".md":
            heading = re.search(r"^#\s+(.+)$", text, flags=re.MULTILINE)
            if heading:
                title = heading.group(1).strip()
        for chunk in chunk_text(text, max_tokens, count_tokens):
            pid = passage_id(title, chunk)
            corpus.setdefault(pid, {"id": pid, "title": title, "text": chunk})
    return list(corpus.values())
