"""Corpora: the deduplicated union of the questions' paragraphs, each passage with a stable id."""

from pathlib import Path

from ragscale.data import build_corpus, load_jsonl, passage_id

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_the_corpus_is_the_deduplicated_union_of_the_paragraphs(tmp_path):
    examples = load_jsonl(FIXTURES / "hotpotqa_mini.jsonl", cache_dir=tmp_path)
    once = build_corpus(examples)
    twice = build_corpus(examples + examples)
    assert len(once) == sum(len(e.paragraphs) for e in examples) == 30
    assert twice == once
    assert set(once[0]) == {"id", "title", "text"}


def test_passage_ids_are_stable_hashes_of_title_and_text():
    corpus = build_corpus([{"paragraphs": [{"title": "A", "text": "x"}, {"title": "A", "text": "y"}]}])
    assert corpus[0]["id"] == passage_id("A", "x") == "87c7567107483d30"  # sha256("A\nx")[:16]
    assert corpus[0]["id"] != corpus[1]["id"]
    assert len(corpus[0]["id"]) == 16


def test_paragraphs_with_the_same_title_but_different_text_are_both_kept():
    corpus = build_corpus(
        [{"paragraphs": [{"title": "A", "text": "x"}]}, {"paragraphs": [{"title": "A", "text": "z"}]}]
    )
    assert [p["text"] for p in corpus] == ["x", "z"]
