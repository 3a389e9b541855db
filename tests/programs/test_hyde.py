"""HyDE: the search runs with a hypothetical passage written for the question."""

from method_doubles import HAPPY_PATHS, OverlapRetriever, run

from ragscale.programs.hyde import HyDE
from ragscale.programs.retrieval import HybridRetriever


def test_hyde_searches_with_the_hypothetical_passage_not_the_question():
    retriever = OverlapRetriever()
    prediction, _ = run(HyDE(retriever, k=2), HAPPY_PATHS["hyde"][1])
    assert retriever.queries == [prediction.hypothetical_passage]
    assert prediction.hypothetical_passage.startswith("Scott Derrickson")


def test_hyde_uses_only_the_dense_side_of_a_hybrid_retriever():
    dense, bm25 = OverlapRetriever(), OverlapRetriever()
    prediction, _ = run(HyDE(HybridRetriever(dense, bm25), k=2), HAPPY_PATHS["hyde"][1])
    assert dense.calls == [(prediction.hypothetical_passage, 2)]
    assert bm25.calls == []
