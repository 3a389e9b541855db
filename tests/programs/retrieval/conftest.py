"""The retrieval tests' corpus, cut from HotpotQA dev (real chromadb, the real packaged MiniLM embedder and real
rank-bm25 run on it), and its dense index, built once for the session."""

import json
from pathlib import Path

import pytest

from ragscale.programs.retrieval import DenseRetriever

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "hotpotqa_mini.jsonl"


def fixture_corpus() -> list[dict]:
    corpus = {}
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        for paragraph in json.loads(line)["paragraphs"]:
            key = f"{paragraph['title']}\n{paragraph['text']}"
            corpus.setdefault(
                key, {"id": f"p{len(corpus):02d}", "title": paragraph["title"], "text": paragraph["text"]}
            )
    return list(corpus.values())


@pytest.fixture(scope="session")
def corpus() -> list[dict]:
    corpus = fixture_corpus()
    assert len(corpus) >= 10
    return corpus


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("index")


@pytest.fixture(scope="session")
def dense(corpus, index_dir) -> DenseRetriever:
    return DenseRetriever(corpus, index_dir=index_dir)
