"""What runs at inference time: one RAG method per module, registered by CLI name."""

from ragscale.programs.closed_book import ClosedBook
from ragscale.programs.drag import DRAG
from ragscale.programs.iterdrag import IterDRAG
from ragscale.programs.rag import RAG

PROGRAMS: dict[str, type] = {"closed-book": ClosedBook, "rag": RAG, "drag": DRAG, "iterdrag": IterDRAG}

__all__ = ["DRAG", "PROGRAMS", "RAG", "ClosedBook", "IterDRAG"]
