"""Retrieval backends: dense (chromadb + a packaged embedder), BM25 (rank-bm25) and their RRF hybrid.

Every retriever is called as ``retriever(query, k) -> list[Passage]``, most relevant first, and is shared (not
copied) when DSPy deep-copies a program. Heavy libraries (torch, transformers, chromadb) load on first use.
"""

from ragscale.programs.retrieval.bm25 import STOPWORDS, BM25Retriever, tokenize
from ragscale.programs.retrieval.dense import DenseRetriever
from ragscale.programs.retrieval.embedder import EMBEDDERS, MiniLMEmbedder, get_embedder
from ragscale.programs.retrieval.hybrid import RETRIEVERS, HybridRetriever, build_retriever, rrf
from ragscale.programs.retrieval.passage import (
    Passage,
    Retriever,
    format_passage,
    merge_by_rank,
    most_relevant_last,
    references,
    trim_to_budget,
)

__all__ = [
    "EMBEDDERS",
    "RETRIEVERS",
    "STOPWORDS",
    "BM25Retriever",
    "DenseRetriever",
    "HybridRetriever",
    "MiniLMEmbedder",
    "Passage",
    "Retriever",
    "build_retriever",
    "format_passage",
    "get_embedder",
    "merge_by_rank",
    "most_relevant_last",
    "references",
    "rrf",
    "tokenize",
    "trim_to_budget",
]
