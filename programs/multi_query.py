"""Multi-Query: several rephrasings of the question, each retrieved for, their passages united.

After LangChain's ``MultiQueryRetriever`` (LangChain docs, "query transformations", 2023): an LM writes ``n``
versions of the question from different angles, each is sent to the retriever, and the union of the results,
without duplicates, is the context of one answer. In DSPy: one ``Predict(Rephrase)`` with a typed
``queries: list[str]`` output, the retriever called once per query (the original question included, as
LangChain's ``include_original=True``), and ``Predict(Answer)`` over the union, ordered by the best rank
each passage reached and placed most relevant last.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.behaviour import distinct
from ragscale.programs.retrieval import format_passage, merge_by_rank, most_relevant_last, references
from ragscale.signatures import Answer
from ragscale.signatures.methods import Rephrase


class MultiQuery(Method):
    """rephrase(question) -> n queries; retrieve(each, k); answer(union of the passages, question)."""

    name = "multi-query"
    floors = (("distinct_queries", 1.5),)  # below it, mostly the question alone: RAG

    def __init__(self, retriever, k: int, n_queries: int = 3):
        super().__init__()
        self.retriever, self.k, self.n_queries = retriever, k, n_queries
        self.rephrase = dspy.Predict(Rephrase)
        self.answer = dspy.Predict(Answer)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer": self.k * (self.n_queries + 1)}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Distinct queries retrieved for, the question included."""
        return {"distinct_queries": distinct(prediction.queries)}

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows Multi-Query's step when it retrieved for a rephrasing of its own, not only the question."""
        return distinct(prediction.queries) >= 2

    def forward(self, question: str) -> dspy.Prediction:
        rephrasings = self.rephrase(question=question, n=self.n_queries).queries[: self.n_queries]
        queries = [question, *rephrasings]
        passages = most_relevant_last(merge_by_rank([self.retriever(query, self.k) for query in queries]))
        answer = self.answer(documents=[format_passage(p) for p in passages], question=question).answer
        return dspy.Prediction(answer=answer, passages=references(passages), queries=queries)
