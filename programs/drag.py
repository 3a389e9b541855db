"""DRAG: demonstration-based RAG, whose demonstrations carry their own retrieved documents.

Yue et al. 2024, "Inference Scaling for Long-Context RAG" (arXiv:2410.04343), section 3.2: the prompt holds m
in-context examples, each made of the documents retrieved for that example's question, the question and its
answer, followed by the k documents retrieved for the test question and the question; documents are ordered
most relevant last. Scaling k and m scales the effective context.

In DSPy the test-time part is RAG's (one retriever call, one ``Predict(Answer)``); the demonstrations are what
differs. ``demo_documents = True`` tells the compiler (``ragscale.optimizers.teleprompters``) to keep each
demonstration's ``documents`` -- retrieved by this program's own retriever for labeled demos, or recorded in
the trace for bootstrapped ones -- trimmed to ``docs_per_demo`` with the most relevant kept, last.
"""

from ragscale.programs.rag import RAG


class DRAG(RAG):
    """m x (documents, question, answer) demonstrations, then retrieve(question, k) -> answer."""

    name = "drag"
    demo_documents = True  # each demonstration keeps the documents retrieved for its own question
    without_demos = RAG.name  # with no demonstrations, the prompt is RAG's
