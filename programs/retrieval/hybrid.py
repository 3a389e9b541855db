"""Hybrid retrieval by reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009), and the factory.

RRF score of a passage: ``sum_i w_i / (constant + rank_i)`` over the rankings that contain it, rank starting at 1,
``constant = 60`` (the paper's k), ``w_i = 1`` unless weights are given. A passage repeated inside one ranking counts
at its best rank only. Ties keep first-seen order (earlier ranking, higher rank).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ragscale.process import REQUEST_TIMEOUT_S
from ragscale.programs.retrieval.bm25 import BM25Retriever
from ragscale.programs.retrieval.dense import DenseRetriever
from ragscale.programs.retrieval.embedder import MiniLMEmbedder
from ragscale.programs.retrieval.passage import Passage, Retriever

RETRIEVERS = ("dense", "bm25", "hybrid")


def rrf(
    rankings: Sequence[Sequence[Passage]], constant: int = 60, weights: Sequence[float] | None = None
) -> list[Passage]:
    """Fuse most-relevant-first rankings into one, deduplicated by passage id; ``score`` is the fused score."""
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"got {len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    first: dict[str, Passage] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        seen: set[str] = set()
        for rank, passage in enumerate(ranking, start=1):
            if passage.id in seen:
                continue
            seen.add(passage.id)
            first.setdefault(passage.id, passage)
            scores[passage.id] = scores.get(passage.id, 0.0) + weight / (constant + rank)
    order = sorted(first, key=lambda i: -scores[i])  # stable: ties keep first-seen order
    return [replace(first[i], score=scores[i]) for i in order]


class HybridRetriever:
    """RRF of a dense and a BM25 retriever.

    Each side returns ``depth(k) = max(k * depth_factor, min_depth)`` candidates (default ``max(3k, 20)``) so
    a passage ranked moderately by both can overtake one ranked high by a single side; the fused list is cut
    to ``k``. ``weights`` = (dense, bm25).
    """

    def __init__(
        self,
        dense: Retriever,
        bm25: Retriever,
        *,
        rrf_constant: int = 60,
        weights: Sequence[float] | None = None,
        depth_factor: int = 3,
        min_depth: int = 20,
    ) -> None:
        self.dense = dense
        self.bm25 = bm25
        self.rrf_constant = rrf_constant
        self.weights = tuple(weights) if weights is not None else None
        self.depth_factor = depth_factor
        self.min_depth = min_depth

    def __call__(self, query: str, k: int) -> list[Passage]:
        if k <= 0:
            return []
        depth = max(k * self.depth_factor, self.min_depth)
        return rrf(
            [self.dense(query, depth), self.bm25(query, depth)], constant=self.rrf_constant, weights=self.weights
        )[:k]

    def __deepcopy__(self, memo: dict) -> HybridRetriever:
        return self

    def __repr__(self) -> str:
        return (
            f"HybridRetriever({self.dense!r}, {self.bm25!r}, rrf_constant={self.rrf_constant}, weights={self.weights})"
        )


def build_retriever(
    corpus: Sequence[Mapping],
    *,
    kind: str = "hybrid",
    index_dir: Path,
    embedder: str | MiniLMEmbedder = "minilm",
    chroma_url: str | None = None,
    key: str | None = None,
    progress: bool = False,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> Retriever:
    """A ready retriever over ``corpus`` (entries ``{"id", "title", "text"}``), its indexes under ``index_dir``.

    ``kind`` is one of ``RETRIEVERS``: "dense" (chromadb, or the server at ``chroma_url``), "bm25" or "hybrid".
    Missing passages are indexed now; an existing index for the same corpus (``key``, its digest, names it) and
    embedder is reused. ``progress`` draws a bar while an index is built. ``timeout_s`` bounds each request to a
    chroma server.
    """
    if kind not in RETRIEVERS:
        raise ValueError(f"unknown retriever kind {kind!r}; valid kinds: {', '.join(RETRIEVERS)}")
    if kind == "bm25":
        return BM25Retriever(corpus, index_dir=index_dir, key=key, progress=progress)
    dense = DenseRetriever(
        corpus, index_dir=index_dir, embedder=embedder, chroma_url=chroma_url, key=key, progress=progress,
        timeout_s=timeout_s,
    )  # fmt: skip
    if kind == "dense":
        return dense
    return HybridRetriever(dense, BM25Retriever(corpus, index_dir=index_dir, key=key, progress=progress))
