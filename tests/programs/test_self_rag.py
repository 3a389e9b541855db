"""Self-RAG: whether to retrieve, which passages are relevant, and whether the answer is supported."""

from method_doubles import HAPPY_PATHS, QUESTION, OverlapRetriever, ids, prompt, run

from ragscale.programs.self_rag import SelfRAG


def test_self_rag_answers_without_retrieval_when_it_decides_none_is_needed():
    retriever = OverlapRetriever()
    prediction, _ = run(SelfRAG(retriever, k=5), [{"needs_retrieval": False}, {"answer": "Paris"}])
    assert prediction.answer == "Paris"
    assert prediction.retrieved is False
    assert retriever.calls == []
    assert prediction.passages == []


def test_self_rag_stops_after_a_fully_supported_useful_answer():
    retriever = OverlapRetriever()
    prediction, _ = run(SelfRAG(retriever, k=2, max_rounds=3), HAPPY_PATHS["self-rag"][1])
    assert len(prediction.rounds) == 1
    assert [g["grade"] for g in prediction.rounds[0]["grades"]] == ["relevant", "irrelevant"]
    assert [g["id"] for g in prediction.rounds[0]["grades"]] == [p.id for p in retriever.results[0]]
    assert ids(prediction) == [retriever.results[0][0].id]  # only the relevant passage


def test_self_rag_retries_with_a_rewritten_query_and_keeps_the_best_supported_round():
    retriever = OverlapRetriever()
    replies = [
        {"needs_retrieval": True},
        {"grade": "relevant"},
        {"grade": "relevant"},
        {"answer": "Denver"},
        {"support": "fully"},
        {"usefulness": 2},
        {"query": "Scott Derrickson birthplace"},
        {"grade": "relevant"},
        {"grade": "irrelevant"},
        {"answer": "Los Angeles"},
        {"support": "partially"},
        {"usefulness": 5},
    ]
    prediction, lm = run(SelfRAG(retriever, k=2, max_rounds=2), replies)
    assert retriever.queries == [QUESTION, "Scott Derrickson birthplace"]
    assert QUESTION in prompt(lm, 6)  # the rewrite sees the query that failed
    assert [r["support"] for r in prediction.rounds] == ["fully", "partially"]
    assert prediction.answer == "Denver"


def test_self_rag_answers_directly_when_no_round_finds_a_relevant_passage():
    retriever = OverlapRetriever()
    replies = [{"needs_retrieval": True}, {"grade": "irrelevant"}, {"grade": "irrelevant"}]
    replies += [{"query": "Scott Derrickson"}, {"grade": "irrelevant"}, {"grade": "irrelevant"}, {"answer": "Denver"}]
    prediction, _ = run(SelfRAG(retriever, k=2, max_rounds=2), replies)
    assert prediction.retrieved is True
    assert [r["answer"] for r in prediction.rounds] == [None, None]
    assert prediction.passages == []


def test_self_rag_behaviour_sees_a_question_answered_without_retrieval():
    self_rag, _ = run(SelfRAG(OverlapRetriever(), k=5), [{"needs_retrieval": False}, {"answer": "Denver"}])
    assert SelfRAG.behaviour(QUESTION, self_rag)["retrieval_rate"] == 0.0
