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
        ranked = Reranker(_fixed_retriever(found), depth=3, threads=1, order="grade")("q", 3)
    assert [p.id for p in ranked] == ["2", "3", "1"]
    words = lambda text: len(text.split())  # noqa: E731
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        cut = Reranker(_fixed_retriever(found), depth=3, budget=10, count_tokens=words, threads=1, order="grade")(
            "q", 3
        )
    assert [p.id for p in cut] == ["2", "3"]  # "doc, page 2: text 2" is 5 words; the third would pass 10


def test_a_passage_graded_relevant_climbs_from_below_the_cut_and_scores_its_grade():
    from ragscale.programs.retrieval import Passage
    from ragscale.programs.retrieval.rerank import Reranker

    found = [Passage(id=str(i), title=f"doc, page {i}", text=f"text {i}") for i in range(1, 5)]
    grades = [{"grade": g} for g in ("irrelevant", "ambiguous", "irrelevant", "relevant")]
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        ranked = Reranker(_fixed_retriever(found), depth=4, threads=1, order="grade")("q", 2)
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


def test_with_option_scores_candidates_of_one_label_are_ordered_by_their_expected_grade():
    from doubles import BiasedGrader, biased_lm

    from ragscale.programs.lm.adapter import FieldAdapter
    from ragscale.programs.retrieval import Passage
    from ragscale.programs.retrieval.rerank import Reranker

    texts = ["The Eiffel Tower is in Paris.", "A page about plays.", "Hamlet is by William Shakespeare."]
    found = [Passage(id=str(i), title=f"doc {i}", text=t) for i, t in enumerate(texts)]
    reranker = Reranker(_fixed_retriever(found), depth=3, threads=1, order="grade")
    with dspy.context(lm=biased_lm(BiasedGrader()), adapter=FieldAdapter()):
        ranked = reranker("Who wrote Hamlet?", 3)
        assert reranker.grade_counts == {"relevant": 3}  # the biased grader calls all three relevant
        assert [p.id for p in ranked] == ["2", "1", "0"]
        assert ranked[0].score > ranked[1].score > ranked[2].score
        reranker.grade.calibrate()
        calibrated = reranker("Who wrote Hamlet?", 3)
    assert [p.id for p in calibrated] == ["2", "1", "0"]
    assert calibrated[2].score < 0.5  # calibrated, the Eiffel passage is more likely irrelevant than not


def test_the_default_fused_order_moves_rejected_candidates_down_without_discarding_the_first_stage_order():
    import pytest

    from ragscale.programs.retrieval import Passage
    from ragscale.programs.retrieval.rerank import Reranker

    found = [Passage(id=str(i), title=f"doc {i}", text=f"text {i}") for i in range(1, 5)]
    grades = [{"grade": g} for g in ("irrelevant", "relevant", "relevant", "irrelevant")]
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        by_grade = Reranker(_fixed_retriever(found), depth=4, threads=1, order="grade")("q", 4)
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        fused = Reranker(_fixed_retriever(found), depth=4, threads=1)("q", 4)  # fused is the default
    assert [p.id for p in by_grade] == ["2", "3", "1", "4"]
    # RRF of grade ranks (2, 3, 1, 4) and first-stage ranks (1, 2, 3, 4): 1/61 + 1/62 for "2" beats
    # 1/63 + 1/61 for "1", which beats 1/62 + 1/63 for "3"
    assert [p.id for p in fused] == ["2", "1", "3", "4"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)
    with pytest.raises(ValueError, match="unknown reranker order 'label'; valid: grade, fused"):
        Reranker(_fixed_retriever(found), order="label")
