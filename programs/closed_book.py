"""Closed-book QA: the model answers from its parameters alone, no retrieval.

The zero-document baseline of Yue et al. 2024, "Inference Scaling for Long-Context RAG" (arXiv:2410.04343):
the paper's zero-shot QA (and, with demonstrations, many-shot QA) against which retrieval is measured. In DSPy
one ``Predict(AnswerClosedBook)``; compiled, its demonstrations are question -> answer pairs. The constructor
accepts and ignores ``retriever`` and ``k`` so every method is built the same way.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.signatures import AnswerClosedBook


class ClosedBook(Method):
    """question -> answer, no passages."""

    name = "closed-book"
    retrieves = False

    def __init__(self, retriever: object = None, k: int = 0):
        super().__init__()
        self.answer = dspy.Predict(AnswerClosedBook)

    def forward(self, question: str) -> dspy.Prediction:
        answer = self.answer(question=question).answer
        return dspy.Prediction(answer=answer, passages=[])
