"""HyDE: a hypothetical passage, written by the LM, is the query of dense retrieval.

Gao et al. 2022, "Precise Zero-Shot Dense Retrieval without Relevance Labels": an instruction-following LM
writes a document that answers the question (it may hold false details); its embedding, not the question's,
searches the corpus, since a passage-shaped query lands closer to real passages in embedding space. The
paper averages several samples with the question's embedding; here one passage is written and its text is
the query. In DSPy: ``Predict(Hypothesize)`` writes the passage, the retriever is called with that text as
the query, and ``Predict(Answer)`` reads the real passages found. The retriever may be hybrid (then BM25 sees
the passage's words too); when it exposes a dense-only path as an attribute ``dense`` (as
``HybridRetriever`` does), that path is used, as the paper intends.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.retrieval import format_passage, most_relevant_last, references
from ragscale.signatures import Answer, Hypothesize


class HyDE(Method):
    """hypothesize(question) -> passage; retrieve(passage, k), dense-only when offered; answer."""

    name = "hyde"
    floors = (("hypothetical_passage_rate", 0.9),)  # below it, searching with empty passages

    def __init__(self, retriever, k: int):
        super().__init__()
        self.retriever, self.k = retriever, k
        self.hypothesize = dspy.Predict(Hypothesize)
        self.answer = dspy.Predict(Answer)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer": self.k}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Whether a hypothetical passage was written (``hypothetical_passage_rate``), and its words."""
        words = len(str(prediction.hypothetical_passage or "").split())
        return {"hypothetical_passage_rate": float(words > 0), "hypothetical_passage_words": words}

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows HyDE's step when it wrote a hypothetical passage to search with."""
        return self.behaviour(example.question, prediction)["hypothetical_passage_rate"] == 1.0

    def forward(self, question: str) -> dspy.Prediction:
        hypothetical = self.hypothesize(question=question).passage
        search = getattr(self.retriever, "dense", self.retriever)
        passages = most_relevant_last(search(hypothetical, self.k))
        documents = [format_passage(p) for p in passages]
        answer = self.answer(documents=documents, question=question).answer
        return dspy.Prediction(answer=answer, passages=references(passages), hypothetical_passage=hypothetical)
