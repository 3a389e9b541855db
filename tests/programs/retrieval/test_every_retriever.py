"""What every kind of retriever shares (dense, BM25, hybrid, built by ``build_retriever``): k distinct passages
most relevant first, the same answers from several threads, and one index shared by every copy of a program."""

import copy

import dspy
import pytest

from ragscale.programs.retrieval import BM25Retriever, HybridRetriever, build_retriever

QUESTION = "In which county is the town in which Raymond Robertsen was born ?"


GOLD = {"Raymond Robertsen", "Hammerfest"}


@pytest.mark.parametrize("kind", ["dense", "bm25", "hybrid"])
def test_every_kind_of_retriever_returns_k_distinct_passages_most_relevant_first(kind, corpus, dense, index_dir):
    retriever = build_retriever(corpus, kind=kind, index_dir=index_dir)
    passages = retriever(QUESTION, 5)
    assert len(passages) == 5
    assert len({p.id for p in passages}) == 5
    assert [p.score for p in passages] == sorted((p.score for p in passages), reverse=True)
    assert passages[0].title in GOLD


def test_a_retriever_answers_the_same_when_called_from_several_threads(dense, corpus):
    from concurrent.futures import ThreadPoolExecutor

    hybrid = HybridRetriever(dense, BM25Retriever(corpus))
    questions = [QUESTION, "an heiress famous for awful opera performances"] * 4
    expected = [[p.id for p in hybrid(q, 5)] for q in questions]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda q: [p.id for p in hybrid(q, 5)], questions))
    assert got == expected


def test_an_unknown_retriever_kind_lists_the_valid_ones(corpus, tmp_path):
    with pytest.raises(ValueError, match="valid kinds: dense, bm25, hybrid"):
        build_retriever(corpus, kind="splade", index_dir=tmp_path)


class Holder(dspy.Module):
    def __init__(self, retriever):
        super().__init__()
        self.retriever = retriever
        self.answer = dspy.Predict("question -> answer")


def test_a_deep_copied_program_shares_its_retriever_and_index(dense, corpus, tmp_path):
    hybrid = HybridRetriever(dense, BM25Retriever(corpus, index_dir=tmp_path))
    program = Holder(hybrid)
    copied = program.deepcopy()
    assert copied.retriever is hybrid
    assert copy.deepcopy(program).retriever.dense.collection is dense.collection
    assert copy.deepcopy(dense.embedder) is dense.embedder
    assert copied.answer is not program.answer
