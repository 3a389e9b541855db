"""CRAG: retrieved passages graded, and a corrective search when they are not relevant."""

from method_doubles import CORPUS, HAPPY_PATHS, QUESTION, OverlapRetriever, ids, prompt, run

from ragscale.programs.crag import CRAG
from ragscale.programs.retrieval import BM25Retriever


def test_crag_keeps_only_the_relevant_passages_when_one_is_relevant():
    retriever = OverlapRetriever()
    prediction, _ = run(CRAG(retriever, k=3), HAPPY_PATHS["crag"][1])
    assert prediction.action == "correct"
    assert prediction.rewritten_query is None
    assert ids(prediction) == [retriever.results[0][0].id]
    assert [g["grade"] for g in prediction.grades] == ["relevant", "irrelevant", "ambiguous"]
    assert [g["id"] for g in prediction.grades] == [p.id for p in retriever.results[0]]
    assert len(retriever.calls) == 1


def test_crag_rewrites_and_searches_the_fallback_when_every_passage_is_irrelevant():
    retriever, fallback = OverlapRetriever(), BM25Retriever(CORPUS)
    replies = [{"grade": "irrelevant"}] * 3 + [{"query": "capital of Colorado state"}, {"answer": "Denver"}]
    prediction, lm = run(CRAG(retriever, k=3, fallback=fallback), replies)
    assert prediction.action == "incorrect"
    assert prediction.rewritten_query == "capital of Colorado state"
    graded = {p.id for p in retriever.results[0]}
    found = [p.id for p in fallback("capital of Colorado state", 9) if p.id not in graded]
    assert found and sorted(ids(prediction)) == sorted(found[:3])
    assert len(retriever.calls) == 1  # the second search went to the fallback
    assert "Colorado is a state" in prompt(lm, 4)


def test_crag_keeps_ambiguous_passages_beside_a_wider_search_of_the_same_retriever():
    retriever = OverlapRetriever()
    replies = [{"grade": "ambiguous"}, {"grade": "irrelevant"}, {"grade": "irrelevant"}]
    prediction, _ = run(CRAG(retriever, k=3), [*replies, {"query": "Scott Derrickson Denver"}, {"answer": "Denver"}])
    assert prediction.action == "ambiguous"
    assert retriever.calls[1] == ("Scott Derrickson Denver", 9)
    assert ids(prediction)[-1] == retriever.results[0][0].id  # the ambiguous passage, closest to the question
    irrelevant = {p.id for p in retriever.results[0][1:]}
    assert not irrelevant & set(ids(prediction))
    assert len(prediction.passages) == 4  # the ambiguous one and k new ones


def test_crag_behaviour_sees_a_corrective_search():
    crag, _ = run(CRAG(OverlapRetriever(), k=2), [{"grade": "irrelevant"}] * 2 + [{"query": "q"}, {"answer": "x"}])
    assert CRAG.behaviour(QUESTION, crag)["corrective_rate"] == 1.0
