"""Corpora: plain dicts ``{"id", "title", "text"}`` built from dataset paragraphs.

A passage id is ``passage_id(title, text)``: the first 16 hex digits of SHA-256 over ``title + "\\n" + text``,
so the same passage gets the same id in every run, split and dataset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any


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
