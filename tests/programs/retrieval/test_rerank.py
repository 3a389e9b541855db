"""The reranker: candidates ordered by the LM grader, cut to k and to a token budget, its grader compilable."""

import dspy
from dspy.utils import DummyLM


def _fixed_retriever(passages):
    def retrieve(query, k):
        return passages[:k]

    return retrieve


def test_the_reranker_orders_candidates_by_grade_and_cuts_to_the_budget():
    from ragscale.programs.retrieval import Passage
    from ragscale.programs.retrieval.rerank import Reranker

    found = [Passage(id=str(i), title=f"doc, page {i}", text=f"text {i}") for i in range(1, 4)]
    grades = [{"grade": "irrelevant"}, {"grade": "relevant"}, {"grade": "ambiguous"}]
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        ranked = Reranker(_fixed_retriever(found), depth=3, threads=1)("q", 3)
    assert [p.id for p in ranked] == ["2", "3", "1"]
    words = lambda text: len(text.split())  # noqa: E731
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        cut = Reranker(_fixed_retriever(found), depth=3, budget=10, count_tokens=words, threads=1)("q", 3)
    assert [p.id for p in cut] == ["2", "3"]  # "doc, page 2: text 2" is 5 words; the third would pass 10


def test_a_passage_graded_relevant_climbs_from_below_the_cut_and_scores_its_grade():
    from ragscale.programs.retrieval import Passage
    from ragscale.programs.retrieval.rerank import Reranker

    found = [Passage(id=str(i), title=f"doc, page {i}", text=f"text {i}") for i in range(1, 5)]
    grades = [{"grade": g} for g in ("irrelevant", "ambiguous", "irrelevant", "relevant")]
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        ranked = Reranker(_fixed_retriever(found), depth=4, threads=1)("q", 2)
    assert [(p.id, p.score) for p in ranked] == [("4", 1.0), ("2", 0.5)]


def test_a_program_compiles_the_rerankers_grader_and_shares_its_retriever():
    import copy

    from ragscale.programs.rag import RAG
    from ragscale.programs.retrieval.rerank import Reranker

    inner = _fixed_retriever([])
    program = RAG(retriever=Reranker(inner, depth=3), k=2)
    assert "retriever.grade" in [name for name, _ in program.named_predictors()]
    copied = copy.deepcopy(program)
    assert copied.retriever.grade is not program.retriever.grade
    assert copied.retriever.retriever is inner
