"""Contextual retrieval: an LM writes a short context for each chunk, prepended to it before indexing.

Anthropic, "Introducing Contextual Retrieval" (2024): each chunk is given 50-100 tokens of context written by
an LM that sees the whole document, and the contextualised chunk is indexed by both BM25 and the embedder,
which cuts failed retrievals. In DSPy: one ``Predict(Situate)`` per chunk. When the document is longer than
``max_document_chars`` the model sees a window of it centred on the chunk (the chunk's position is found in
the document text; when it is not found, the start of the document), so a small model's context suffices;
the context is capped at ``max_tokens`` (80: Anthropic's 50-100 tokens).
"""

from __future__ import annotations

import dspy

from ragscale.signatures.documents import Situate


def document_window(document: str, chunk: str, max_chars: int) -> str:
    """``document`` itself when it fits in ``max_chars``, else ``max_chars`` of it centred on ``chunk``."""
    if max_chars <= 0 or len(document) <= max_chars:
        return document
    probe = " ".join(chunk.split()[:12])
    flat = " ".join(document.split())
    at = flat.find(probe) if probe else -1
    if at < 0:
        return flat[:max_chars]
    start = max(0, min(at + len(probe) // 2 - max_chars // 2, len(flat) - max_chars))
    return flat[start : start + max_chars]


class Contextualize(dspy.Module):
    """situate(document window, chunk) -> a 1-2 sentence context for the chunk."""

    def __init__(self, max_document_chars: int = 6000, max_tokens: int = 80):
        super().__init__()
        self.max_document_chars = max_document_chars
        self.situate = dspy.Predict(Situate, max_tokens=max_tokens)

    def forward(self, document: str, chunk: str) -> dspy.Prediction:
        window = document_window(document, chunk, self.max_document_chars)
        context = self.situate(document=window, chunk=chunk).context
        return dspy.Prediction(context=" ".join(str(context).split()))
