"""RAG: retrieve the top-k passages for the question and answer over them.

The standard RAG baseline of Yue et al. 2024, "Inference Scaling for Long-Context RAG" (arXiv:2410.04343),
section 3: the k retrieved documents are placed before the question, the most relevant last (closest to the
question). In DSPy: one retriever call and one ``Predict(Answer)``.

How RAG differs from DRAG (drag.py): the forward pass is the same; the demonstrations are not. A compiled RAG's
demonstrations are question -> answer pairs without documents (``demo_documents = False``: the compiler drops
them), so extra shots add little context -- the paper's many-shot QA setting. DRAG's keep their own documents.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.retrieval import format_passage, most_relevant_last, references
from ragscale.signatures import Answer


class RAG(Method):
    """retrieve(question, k) -> answer(documents, question)."""

    name = "rag"
    demo_documents = False  # compiled demonstrations are question -> answer pairs

    def __init__(self, retriever, k: int):
        super().__init__()
        self.retriever, self.k = retriever, k
        self.answer = dspy.Predict(Answer)

    def forward(self, question: str) -> dspy.Prediction:
        passages = most_relevant_last(self.retriever(question, self.k))
        documents = [format_passage(p) for p in passages]
        answer = self.answer(documents=documents, question=question).answer
        return dspy.Prediction(answer=answer, passages=references(passages))
