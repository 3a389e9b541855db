"""RAG-Fusion: the rephrasings' rankings fused by reciprocal rank, the top k answered from."""

from method_doubles import HAPPY_PATHS, OverlapRetriever, ids, prompt, run

from ragscale.programs.rag_fusion import RAGFusion
from ragscale.programs.retrieval import format_passage, rrf


def test_rag_fusion_answers_from_the_top_k_of_the_fused_rankings_most_relevant_last():
    retriever = OverlapRetriever()
    prediction, lm = run(RAGFusion(retriever, k=3, n_queries=2), HAPPY_PATHS["rag-fusion"][1])
    assert [k for _, k in retriever.calls] == [6, 6, 6]  # each ranking goes 2k deep before fusion
    fused = rrf(retriever.results)[:3]
    assert ids(prediction) == [p.id for p in reversed(fused)]
    assert prompt(lm, 1).index(format_passage(fused[0])) > prompt(lm, 1).index(format_passage(fused[2]))
