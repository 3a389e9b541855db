from pathlib import Path

import pytest

from ragscale.data import build_corpus, chunk_text, corpus_from_folder, load_jsonl, passage_id

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
    assert corpus[0]["id"] == passage_id("A", "x") == passage_id("A", "x")
    assert corpus[0]["id"] != corpus[1]["id"]
    assert len(corpus[0]["id"]) == 16


def test_paragraphs_with_the_same_title_but_different_text_are_both_kept():
    corpus = build_corpus(
        [{"paragraphs": [{"title": "A", "text": "x"}]}, {"paragraphs": [{"title": "A", "text": "z"}]}]
    )
    assert [p["text"] for p in corpus] == ["x", "z"]


def test_chunks_keep_whole_paragraphs_within_the_budget():
    text = "one two three\n\nfour five\n\nsix seven eight nine"
    assert chunk_text(text, max_tokens=5) == ["one two three\n\nfour five", "six seven eight nine"]


def test_a_paragraph_longer_than_the_budget_is_split_at_sentences_then_words():
    text = "Alpha beta gamma. Delta epsilon. " + " ".join(f"w{i}" for i in range(7))
    chunks = chunk_text(text, max_tokens=3)
    assert chunks[0] == "Alpha beta gamma."
    assert all(len(c.split()) <= 3 for c in chunks)
    assert " ".join(" ".join(chunks).split()) == " ".join(text.split())


def test_a_folder_of_text_and_markdown_files_becomes_a_titled_corpus(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("first para\n\nsecond para", encoding="utf-8")
    (tmp_path / "b.md").write_text("# Bees\n\nBees make honey.", encoding="utf-8")
    (tmp_path / "skip.json").write_text("{}", encoding="utf-8")
    corpus = corpus_from_folder(tmp_path, max_tokens=2)
    assert [(p["title"], p["text"]) for p in corpus] == [
        ("Bees", "# Bees"),
        ("Bees", "Bees make"),
        ("Bees", "honey."),
        ("notes/a", "first para"),
        ("notes/a", "second para"),
    ]


def test_a_folder_without_text_files_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no \.txt or \.md files"):
        corpus_from_folder(tmp_path)
