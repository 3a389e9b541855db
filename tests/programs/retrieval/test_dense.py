"""The dense retriever on real chromadb and the real packaged MiniLM embedder: rankings, and an index that is
persisted, resumed after a kill, reopened without embedding and kept per corpus."""

import shutil
import sys
from pathlib import Path

import pytest
from servers import free_port, served

from ragscale.programs.retrieval import DenseRetriever, MiniLMEmbedder, Passage

QUESTION = "In which county is the town in which Raymond Robertsen was born ?"


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


def test_dense_retrieval_ranks_the_paragraph_about_the_question_entity_first(dense):
    passages = dense(QUESTION, 5)
    assert passages[0].title == "Raymond Robertsen"
    assert [p.score for p in passages] == sorted((p.score for p in passages), reverse=True)
    assert all(isinstance(p, Passage) for p in passages)


def test_dense_retrieval_matches_a_paraphrase_without_shared_words(dense):
    passages = dense("an heiress famous for awful opera performances", 2)
    assert {p.title for p in passages} == {"Florence Foster Jenkins", "Tryphosa Bates-Batcheller"}


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
        assert not (tmp_path / "dense").exists()
