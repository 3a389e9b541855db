"""A user's own search function is a retriever: its texts and dicts become passages, with the ids a corpus gives."""

import copy

import pytest

from ragscale.data.corpus import passage_id
from ragscale.programs import RAG
from ragscale.programs.retrieval import Passage
from ragscale.programs.retrieval.function import FunctionRetriever, as_passage


def test_a_text_becomes_a_passage_with_the_id_a_corpus_gives_the_same_text():
    passage = as_passage("Paris is the capital of France.")
    assert passage.text == "Paris is the capital of France." and passage.title == ""
    assert passage.id == passage_id("", "Paris is the capital of France.")


def test_a_dict_gives_its_text_title_and_id_and_flashrags_contents_counts_as_text():
    assert as_passage({"id": 7, "title": "Paris", "text": "Capital."}) == Passage("7", "Paris", "Capital.")
    assert as_passage({"title": "Paris", "text": "Capital."}).id == passage_id("Paris", "Capital.")
    assert as_passage({"contents": "Capital."}).text == "Capital."


def test_a_passage_is_kept_and_anything_else_is_named_in_the_error():
    kept = Passage("a", "A", "text")
    assert as_passage(kept) is kept
    with pytest.raises(TypeError, match=r"needs a string 'text'.*got keys \['body'\]"):
        as_passage({"body": "x"})
    with pytest.raises(TypeError, match="got int"):
        as_passage(3)


def test_a_function_retriever_returns_at_most_k_passages_and_is_shared_when_copied():
    retriever = FunctionRetriever(lambda query, k: [f"{query} {i}" for i in range(10)])
    assert [p.text for p in retriever("q", 2)] == ["q 0", "q 1"]
    assert copy.deepcopy(retriever) is retriever


def test_a_method_wraps_a_plain_function_given_as_its_retriever_and_keeps_a_retriever_object_as_it_is():
    def search(query, k):
        return ["one", {"title": "T", "text": "two"}][:k]

    program = RAG(search, k=2)
    assert isinstance(program.retriever, FunctionRetriever)
    assert [p.text for p in program.retriever("q", 2)] == ["one", "two"]
    assert copy.deepcopy(program).retriever is program.retriever
    own = FunctionRetriever(search)
    assert RAG(own, k=2).retriever is own
