"""What runs at inference time: one RAG method per module, each a ``Method`` (``programs/base.py``), registered by
its CLI name.

Every method is built as ``cls(retriever=..., k=...)`` (closed-book accepts and ignores both), plus
``max_iterations`` when it iterates (IterDRAG's n); its other knobs (``n_queries``, ...) are keyword arguments with
defaults. ``build_program`` is that call by name; ``method_named`` is the class, for what a method declares.
"""

from ragscale.programs.base import Method
from ragscale.programs.closed_book import ClosedBook
from ragscale.programs.crag import CRAG
from ragscale.programs.decompose_individual import DecomposeIndividual
from ragscale.programs.decompose_recursive import DecomposeRecursive
from ragscale.programs.drag import DRAG
from ragscale.programs.hyde import HyDE
from ragscale.programs.ircot import IRCoT
from ragscale.programs.iterdrag import IterDRAG
from ragscale.programs.multi_query import MultiQuery
from ragscale.programs.rag import RAG
from ragscale.programs.rag_fusion import RAGFusion
from ragscale.programs.rat import RAT
from ragscale.programs.search_chain import SearchChain
from ragscale.programs.self_rag import SelfRAG
from ragscale.programs.step_back import StepBackRAG

PROGRAMS: dict[str, type[Method]] = {
    method.name: method
    for method in (
        # Yue et al. 2024, "Inference Scaling for Long-Context RAG"
        ClosedBook,
        RAG,
        DRAG,
        IterDRAG,
        # query transformations, multi-step and self-reflective RAG
        MultiQuery,
        RAGFusion,
        DecomposeRecursive,
        DecomposeIndividual,
        StepBackRAG,
        HyDE,
        IRCoT,
        SearchChain,
        RAT,
        CRAG,
        SelfRAG,
    )
}


def method_named(method: str) -> type[Method]:
    """The registered class of ``method``; an unknown name raises ``ValueError`` listing the valid ones."""
    if method not in PROGRAMS:
        raise ValueError(f"unknown method {method!r}; valid choices: {', '.join(sorted(PROGRAMS))}")
    return PROGRAMS[method]


def build_program(method: str, retriever=None, *, k: int, iterations: int) -> Method:
    """``method_named(method)(retriever=retriever, k=k)``, with ``max_iterations=iterations`` when it iterates."""
    cls = method_named(method)
    return cls(retriever=retriever, k=k, max_iterations=iterations) if cls.iterates else cls(retriever=retriever, k=k)


__all__ = [
    "CRAG",
    "DRAG",
    "PROGRAMS",
    "RAG",
    "RAT",
    "ClosedBook",
    "DecomposeIndividual",
    "DecomposeRecursive",
    "HyDE",
    "IRCoT",
    "IterDRAG",
    "Method",
    "MultiQuery",
    "RAGFusion",
    "SearchChain",
    "SelfRAG",
    "StepBackRAG",
    "build_program",
    "method_named",
]
