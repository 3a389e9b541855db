"""Multi-query retrieval: the question and its rephrasings searched, the results united."""

from method_doubles import QUESTION, OverlapRetriever, ids, run

from ragscale.programs.multi_query import MultiQuery


def test_multi_query_retrieves_for_the_question_and_each_rephrasing_and_unites_without_repeats():
    retriever = OverlapRetriever()
    replies = [{"queries": ["Doctor Strange director", "Scott Derrickson birthplace", "cut"]}, {"answer": "Denver"}]
    prediction, _ = run(MultiQuery(retriever, k=3, n_queries=2), replies)
    assert prediction.queries == [QUESTION, "Doctor Strange director", "Scott Derrickson birthplace"]
    assert retriever.calls == [(query, 3) for query in prediction.queries]
    assert set(ids(prediction)) == {p.id for ranking in retriever.results for p in ranking}
