"""Reciprocal rank fusion: how the hybrid retriever and RAG-Fusion merge rankings, and the hybrid retriever's scores
over the real dense and BM25 indexes."""

import pytest

from ragscale.programs.retrieval import BM25Retriever, HybridRetriever, Passage, rrf

QUESTION = "In which county is the town in which Raymond Robertsen was born ?"


def ranking(*ids: str) -> list[Passage]:
    return [Passage(id=i, title=f"T{i}", text=f"text {i}") for i in ids]


def test_rrf_adds_one_over_the_constant_plus_rank_across_rankings():
    dense = ranking("a", "b", "c")
    sparse = ranking("c", "a", "d")
    fused = rrf([dense, sparse], constant=60)
    # a: 1/61 + 1/62, c: 1/63 + 1/61, b: 1/62, d: 1/63
    expected = {"a": 1 / 61 + 1 / 62, "c": 1 / 63 + 1 / 61, "b": 1 / 62, "d": 1 / 63}
    assert [p.id for p in fused] == ["a", "c", "b", "d"]
    assert {p.id: p.score for p in fused} == pytest.approx(expected)


def test_rrf_rewards_passages_ranked_high_by_several_retrievers():
    fused = rrf([ranking("x", "shared"), ranking("y", "shared")], constant=60)
    assert fused[0].id == "shared"


def test_rrf_weights_scale_each_rankings_contribution():
    fused = rrf([ranking("a", "b"), ranking("b", "a")], constant=1, weights=[3.0, 1.0])
    # a: 3/2 + 1/3 = 1.8333, b: 3/3 + 1/2 = 1.5
    assert [(p.id, round(p.score, 4)) for p in fused] == [("a", 1.8333), ("b", 1.5)]


def test_rrf_counts_a_passage_repeated_in_one_ranking_once_at_its_best_rank():
    fused = rrf([ranking("a", "a", "b")], constant=60)
    assert [p.id for p in fused] == ["a", "b"]
    assert fused[1].score == pytest.approx(1 / 63)
    assert fused[0].score == pytest.approx(1 / 61)


def test_rrf_rejects_a_weight_count_that_does_not_match_the_rankings():
    with pytest.raises(ValueError, match="2 weights for 1 rankings"):
        rrf([ranking("a")], weights=[1.0, 2.0])


def test_hybrid_scores_are_the_rrf_of_both_sides(dense, corpus, tmp_path):
    bm25 = BM25Retriever(corpus, index_dir=tmp_path)
    hybrid = HybridRetriever(dense, bm25)
    top = hybrid(QUESTION, 1)[0]
    dense_rank = [p.id for p in dense(QUESTION, 20)].index(top.id) + 1
    bm25_rank = [p.id for p in bm25(QUESTION, 20)].index(top.id) + 1
    assert top.score == pytest.approx(1 / (60 + dense_rank) + 1 / (60 + bm25_rank))
