"""What runs at inference time: one RAG method per module, registered by CLI name.

Every program is built as ``cls(retriever=..., k=...)`` (closed-book accepts and ignores both); a method's own
knobs (``max_iterations``, ``n_queries``, ...) are keyword arguments with defaults. ``build_program`` is that
call by name, with IterDRAG's iterations, the one knob a run configures. Every program says how many documents
each of its predictors can see in one call (``max_documents()``), which the context-window check reads.
"""

import dspy

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

PROGRAMS: dict[str, type] = {
    # Yue et al. 2024, "Inference Scaling for Long-Context RAG"
    "closed-book": ClosedBook,
    "rag": RAG,
    "drag": DRAG,
    "iterdrag": IterDRAG,
    # query transformations, multi-step and self-reflective RAG
    "multi-query": MultiQuery,
    "rag-fusion": RAGFusion,
    "decompose-recursive": DecomposeRecursive,
    "decompose-individual": DecomposeIndividual,
    "step-back": StepBackRAG,
    "hyde": HyDE,
    "ircot": IRCoT,
    "search-chain": SearchChain,
    "rat": RAT,
    "crag": CRAG,
    "self-rag": SelfRAG,
}


def build_program(method: str, retriever=None, *, k: int = 5, max_iterations: int = 3) -> dspy.Module:
    """``PROGRAMS[method](retriever=retriever, k=k)``; IterDRAG also gets ``max_iterations`` (its n). An unknown
    method raises ``ValueError`` listing the valid ones."""
    if method not in PROGRAMS:
        raise ValueError(f"unknown method {method!r}; valid choices: {', '.join(sorted(PROGRAMS))}")
    if PROGRAMS[method] is IterDRAG:
        return IterDRAG(retriever=retriever, k=k, max_iterations=max_iterations)
    return PROGRAMS[method](retriever=retriever, k=k)


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
    "MultiQuery",
    "RAGFusion",
    "SearchChain",
    "SelfRAG",
    "StepBackRAG",
    "build_program",
]
