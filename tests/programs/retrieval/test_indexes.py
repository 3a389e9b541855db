"""Real chromadb, the real packaged MiniLM embedder and real rank-bm25 on a fixture cut from HotpotQA dev."""

import copy
import json
import shutil
import sys
from pathlib import Path

import dspy
import numpy as np
import pytest
from servers import free_port, served

from ragscale.programs.retrieval import (
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    MiniLMEmbedder,
    Passage,
    build_retriever,
    tokenize,
)

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "hotpotqa_mini.jsonl"
QUESTION = "In which county is the town in which Raymond Robertsen was born ?"
GOLD = {"Raymond Robertsen", "Hammerfest"}


def fixture_corpus() -> list[dict]:
    corpus = {}
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        for paragraph in json.loads(line)["paragraphs"]:
            key = f"{paragraph['title']}\n{paragraph['text']}"
            corpus.setdefault(
                key, {"id": f"p{len(corpus):02d}", "title": paragraph["title"], "text": paragraph["text"]}
            )
    return list(corpus.values())


class CountingEmbedder:
    """The real embedder, counting what it embeds; can fail on a chosen call to simulate a killed build."""

    name = MiniLMEmbedder().name

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.inner = MiniLMEmbedder()
        self.fail_on_call = fail_on_call
        self.calls = 0
        self.embedded: list[str] = []

    def embed(self, texts):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise KeyboardInterrupt("simulated kill during indexing")
        self.embedded.extend(texts)
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    corpus = fixture_corpus()
    assert len(corpus) >= 10
    return corpus


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("index")


@pytest.fixture(scope="module")
def dense(corpus, index_dir) -> DenseRetriever:
    return DenseRetriever(corpus, index_dir=index_dir)


def test_dense_retrieval_ranks_the_paragraph_about_the_question_entity_first(dense):
    passages = dense(QUESTION, 5)
    assert passages[0].title == "Raymond Robertsen"
    assert [p.score for p in passages] == sorted((p.score for p in passages), reverse=True)
    assert all(isinstance(p, Passage) for p in passages)


def test_dense_retrieval_matches_a_paraphrase_without_shared_words(dense):
    passages = dense("an heiress famous for awful opera performances", 2)
    assert {p.title for p in passages} == {"Florence Foster Jenkins", "Tryphosa Bates-Batcheller"}


def test_the_embedder_runs_packed_linear_layers_on_cpu_with_the_dense_layers_embeddings(corpus):
    from ragscale.programs.lm.packed import PackedLinear

    texts = [f"{p['title']}: {p['text']}" for p in corpus[:12]]
    packed, dense = MiniLMEmbedder(precision="fp32"), MiniLMEmbedder(precision="fp32", pack=False)
    assert any(isinstance(m, PackedLinear) for m in packed._load()[1].modules())
    assert not any(isinstance(m, PackedLinear) for m in dense._load()[1].modules())
    assert np.abs(packed.embed(texts) - dense.embed(texts)).max() < 1e-5


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


def test_hybrid_scores_are_the_rrf_of_both_sides(dense, corpus, tmp_path):
    bm25 = BM25Retriever(corpus, index_dir=tmp_path)
    hybrid = HybridRetriever(dense, bm25)
    top = hybrid(QUESTION, 1)[0]
    dense_rank = [p.id for p in dense(QUESTION, 20)].index(top.id) + 1
    bm25_rank = [p.id for p in bm25(QUESTION, 20)].index(top.id) + 1
    assert top.score == pytest.approx(1 / (60 + dense_rank) + 1 / (60 + bm25_rank))


def test_an_unknown_retriever_kind_lists_the_valid_ones(corpus, tmp_path):
    with pytest.raises(ValueError, match="valid kinds: dense, bm25, hybrid"):
        build_retriever(corpus, kind="splade", index_dir=tmp_path)


def test_an_interrupted_index_is_completed_by_the_next_run_without_re_embedding(corpus, tmp_path):
    killed = CountingEmbedder(fail_on_call=3)
    with pytest.raises(KeyboardInterrupt):
        DenseRetriever(corpus, index_dir=tmp_path, embedder=killed, batch_size=8)
    done = len(killed.embedded)
    assert done == 16

    rerun = CountingEmbedder()
    retriever = DenseRetriever(corpus, index_dir=tmp_path, embedder=rerun, batch_size=8, build=False)
    assert retriever.build() == len(corpus) - done
    assert sorted(killed.embedded + rerun.embedded) == sorted(f"{p['title']}: {p['text']}" for p in corpus)
    assert retriever.collection.count() == len(corpus)


def test_reopening_a_persisted_index_embeds_nothing_and_answers_the_same(corpus, dense, index_dir):
    expected = [p.id for p in dense(QUESTION, 5)]
    reopened_embedder = CountingEmbedder()
    reopened = DenseRetriever(corpus, index_dir=index_dir, embedder=reopened_embedder)
    assert reopened.collection_name == dense.collection_name
    assert reopened_embedder.embedded == []
    assert [p.id for p in reopened(QUESTION, 5)] == expected


def test_a_changed_corpus_gets_a_new_collection(corpus, dense, index_dir):
    smaller = DenseRetriever(corpus[:10], index_dir=index_dir)
    assert smaller.collection_name != dense.collection_name
    assert smaller.collection.count() == 10
    assert dense.collection.count() == len(corpus)


def test_a_persisted_bm25_index_is_reloaded_from_its_arrays_and_answers_the_same(corpus, tmp_path, monkeypatch):
    from ragscale.programs.retrieval import bm25

    built = BM25Retriever(corpus, index_dir=tmp_path)
    assert {path.name for path in built.path.iterdir()} == {"postings.npz", "terms.json"}

    def no_tokenizing(text):
        raise AssertionError("a persisted index is read back, not tokenised again")

    monkeypatch.setattr(bm25, "tokenize", no_tokenizing)
    reloaded = BM25Retriever(corpus, index_dir=tmp_path)
    monkeypatch.undo()
    assert reloaded(QUESTION, 5) == built(QUESTION, 5)


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


@pytest.mark.server
def test_a_chroma_server_given_by_url_serves_the_dense_index(corpus, tmp_path):
    chroma = shutil.which("chroma") or shutil.which("chroma", path=str(Path(sys.executable).parent))  # the venv's
    if chroma is None:
        pytest.fail("the chroma CLI is not installed (it comes with chromadb)")
    port = free_port()
    command = [chroma, "run", "--path", str(tmp_path / "server"), "--host", "127.0.0.1", "--port", str(port)]
    with served(command, port, tmp_path / "chroma.log"):
        retriever = DenseRetriever(corpus, index_dir=tmp_path, chroma_url=f"http://127.0.0.1:{port}")
        assert retriever.collection.count() == len(corpus)
        assert retriever(QUESTION, 1)[0].title == "Raymond Robertsen"
        assert not (tmp_path / "chroma").exists()


def test_a_bm25_build_shows_its_progress_with_passages_per_second_only_when_asked(corpus, capsys):
    BM25Retriever(corpus)
    assert capsys.readouterr().err == ""
    BM25Retriever(corpus, progress=True)
    err = capsys.readouterr().err
    assert "BM25 index: 100%" in err and "passage/s" in err  # tqdm: rate and time left
