"""RAG-Fusion: several generated queries whose rankings are merged by reciprocal rank fusion.

Rackauckas 2024, "RAG-Fusion: a New Take on Retrieval-Augmented Generation": the LM writes ``n`` search
queries related to the question, each is retrieved for, and the rankings are fused with reciprocal rank
fusion (Cormack et al. 2009, score = sum over rankings of 1 / (60 + rank)); the top ``k`` fused passages are
the context of the answer. In DSPy: ``Predict(Rephrase)`` writes the queries (typed ``list[str]``), the
original question's ranking is fused with theirs by ``rrf`` from the retrieval package, and
``Predict(Answer)`` reads the fused top ``k``, most relevant last.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.behaviour import distinct
from ragscale.programs.retrieval import format_passage, most_relevant_last, references, rrf
from ragscale.signatures import Answer
from ragscale.signatures.methods import Rephrase


class RAGFusion(Method):
    """rephrase(question) -> n queries; retrieve(each); rrf -> top k; answer."""

    name = "rag-fusion"
    floors = (("distinct_queries", 1.5),)  # below it, mostly the question alone: RAG with a reranking of one list

    def __init__(self, retriever, k: int, n_queries: int = 3, depth: int | None = None):
        super().__init__()
        self.retriever, self.k, self.n_queries = retriever, k, n_queries
        self.depth = depth or 2 * k  # how deep each ranking goes before fusion
        self.rephrase = dspy.Predict(Rephrase)
        self.answer = dspy.Predict(Answer)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer": self.k}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Distinct queries retrieved for, the question included."""
        return {"distinct_queries": distinct(prediction.queries)}

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows RAG-Fusion's step when it fused a ranking for a query of its own, not only the question's."""
        return distinct(prediction.queries) >= 2

    def forward(self, question: str) -> dspy.Prediction:
        generated = self.rephrase(question=question, n=self.n_queries).queries[: self.n_queries]
        queries = [question, *generated]
        rankings = [self.retriever(query, self.depth) for query in queries]
        passages = most_relevant_last(rrf(rankings)[: self.k])
        documents = [format_passage(p) for p in passages]
        answer = self.answer(documents=documents, question=question).answer
        return dspy.Prediction(answer=answer, passages=references(passages), queries=queries)
