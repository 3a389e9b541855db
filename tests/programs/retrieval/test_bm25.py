"""Real rank-bm25 scoring on the fixture corpus: BM25Retriever's scores, its tokenizer and its persisted index."""

import pytest

from ragscale.programs.retrieval import BM25Retriever, tokenize

QUESTION = "In which county is the town in which Raymond Robertsen was born ?"


def test_bm25_retrieval_finds_the_gold_paragraph_first(corpus, tmp_path):
    bm25 = BM25Retriever(corpus, index_dir=tmp_path)
    passages = bm25(QUESTION, 3)
    assert passages[0].title == "Raymond Robertsen"
    assert [p.score for p in passages] == sorted((p.score for p in passages), reverse=True)


def test_bm25_scores_equal_rank_bm25s_own_scoring(corpus):
    from rank_bm25 import BM25Okapi

    bm25 = BM25Retriever(corpus)
    reference = BM25Okapi([tokenize(f"{p['title']} {p['text']}") for p in corpus])
    queries = (QUESTION, "opera singer wealth Narcissa", "the the county county", "words absent zzzq")
    for query in queries:
        expected = reference.get_scores(tokenize(query)).tolist()
        assert bm25.scores(query).tolist() == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_bm25_floors_the_idf_of_a_term_in_most_passages_as_rank_bm25_does():
    from rank_bm25 import BM25Okapi

    corpus = [{"id": str(i), "title": f"t{i}", "text": f"common word{i % 4} extra{i}"} for i in range(12)]
    corpus[0]["text"] = corpus[1]["text"] = "rare word0"
    reference = BM25Okapi([tokenize(f"{p['title']} {p['text']}") for p in corpus])
    assert any(value < 0 for value in reference.idf.values()) is False  # floored: BM25Okapi replaced it
    for query in ("common", "common word1", "rare common"):
        expected = reference.get_scores(tokenize(query)).tolist()
        assert BM25Retriever(corpus).scores(query).tolist() == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_the_tokenizer_lowercases_splits_on_non_alphanumerics_and_drops_stopwords():
    assert tokenize("The Bates-Batcheller case, of 1868!") == ["bates", "batcheller", "case", "1868"]


def test_a_persisted_bm25_index_is_reloaded_from_its_arrays_and_answers_the_same(corpus, tmp_path, monkeypatch):
    from ragscale.programs.retrieval import bm25

    built = BM25Retriever(corpus, index_dir=tmp_path)
    assert {path.name for path in built.path.iterdir()} == {"postings.npz", "terms.json", "manifest.json"}

    def no_tokenizing(text):
        raise AssertionError("a persisted index is read back, not tokenised again")

    monkeypatch.setattr(bm25, "tokenize", no_tokenizing)
    reloaded = BM25Retriever(corpus, index_dir=tmp_path)
    monkeypatch.undo()
    assert reloaded(QUESTION, 5) == built(QUESTION, 5)


def test_a_bm25_build_shows_its_progress_with_passages_per_second_only_when_asked(corpus, capsys):
    BM25Retriever(corpus)
    assert capsys.readouterr().err == ""
    BM25Retriever(corpus, progress=True)
    err = capsys.readouterr().err
    assert "BM25 index: 100%" in err and "passage/s" in err  # tqdm: rate and time left
