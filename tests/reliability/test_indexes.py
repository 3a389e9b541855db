"""Indexes are checked when opened: a BM25 or chromadb index with a file truncated, altered or missing, or a broken
manifest, is rebuilt with one warning naming its folder and answers as the intact one did; a write that fails on a
full disk raises an OSError naming the index and leaves no temporary file.

Real BM25 and real chromadb with the packaged MiniLM embedder, on the HotpotQA fixture's 30 passages. Each case
damages a copy of one intact index folder, built once for the module; the embedder embeds each text once, so a
rebuild costs chromadb's time and not the model's.
"""

import errno
import json
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from servers import free_port, served

from ragscale.data import build_corpus, load_jsonl
from ragscale.programs.retrieval import BM25Retriever, DenseRetriever, MiniLMEmbedder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QUESTIONS = (
    "In which county is the town in which Raymond Robertsen was born ?",
    "an heiress famous for awful opera performances",
    "Which magazine was started first, Arthur's Magazine or First for Women?",
)


class Remembering:
    """The real MiniLM embedder, each text embedded once."""

    def __init__(self) -> None:
        self.inner = MiniLMEmbedder()
        self.name = self.inner.name
        self.vectors: dict[str, np.ndarray] = {}

    def embed(self, texts):
        new = [text for text in dict.fromkeys(texts) if text not in self.vectors]
        if new:
            self.vectors.update(zip(new, self.inner.embed(new), strict=True))
        return np.stack([self.vectors[text] for text in texts])


EMBEDDER = Remembering()
RETRIEVERS = {
    "bm25": BM25Retriever,
    "dense": lambda corpus, index_dir: DenseRetriever(corpus, index_dir=index_dir, embedder=EMBEDDER),
}


def truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if data else b"\0")  # an empty file is damaged by growing it


def flipped(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def deleted(path: Path) -> None:
    path.unlink()


def retitled(path: Path) -> None:
    """One passage's stored title changed by a letter, wherever the sqlite file holds it."""
    data = path.read_bytes()
    assert b"Raymond Robertsen" in data
    path.write_bytes(data.replace(b"Raymond Robertsen", b"Raymond Robertsem"))


def miscounted(path: Path) -> None:
    manifest = json.loads(path.read_text())
    manifest["passages"] -= 1
    path.write_text(json.dumps(manifest))


def answers(retriever) -> list[list[tuple[str, float]]]:
    return [[(p.id, round(p.score, 5)) for p in retriever(question, 5)] for question in QUESTIONS]


def index_folder(index_dir: Path, kind: str) -> Path:
    (folder,) = (index_dir / kind).iterdir()
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[dict]:
    return build_corpus(load_jsonl(FIXTURES / "hotpotqa_mini.jsonl", cache_dir=tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def intact(corpus, tmp_path_factory) -> tuple[Path, dict]:
    """An index folder holding both indexes, and what each answers."""
    index_dir = tmp_path_factory.mktemp("intact")
    return index_dir, {kind: answers(make(corpus, index_dir=index_dir)) for kind, make in RETRIEVERS.items()}


@pytest.mark.parametrize("kind", RETRIEVERS)
def test_an_intact_index_opens_without_a_warning(kind, corpus, intact, tmp_path, caplog):
    index_dir, expected = intact
    shutil.copytree(index_dir, tmp_path, dirs_exist_ok=True)
    with caplog.at_level(logging.WARNING):
        assert answers(RETRIEVERS[kind](corpus, index_dir=tmp_path)) == expected[kind]
    assert caplog.records == []


DAMAGE = [
    ("bm25", "postings.npz", truncated),
    ("bm25", "postings.npz", flipped),
    ("bm25", "terms.json", truncated),
    ("bm25", "terms.json", flipped),
    ("bm25", "terms.json", deleted),
    ("bm25", "manifest.json", truncated),
    ("bm25", "manifest.json", deleted),
    ("bm25", "manifest.json", miscounted),
    ("dense", "data_level0.bin", truncated),
    ("dense", "data_level0.bin", flipped),
    ("dense", "chroma.sqlite3", truncated),
    ("dense", "chroma.sqlite3", retitled),
    ("dense", "header.bin", truncated),
    ("dense", "length.bin", truncated),
    ("dense", "link_lists.bin", truncated),
    ("dense", "link_lists.bin", deleted),
    ("dense", "manifest.json", truncated),
    ("dense", "manifest.json", deleted),
    ("dense", "manifest.json", miscounted),
]


@pytest.mark.parametrize(
    ("kind", "name", "damage"), DAMAGE, ids=[f"{kind}-{name}-{damage.__name__}" for kind, name, damage in DAMAGE]
)
def test_a_damaged_index_is_rebuilt_with_one_warning_and_answers_as_the_intact_one(
    kind: str, name: str, damage: Callable[[Path], None], corpus, intact, tmp_path, caplog
):
    index_dir, expected = intact
    shutil.copytree(index_dir, tmp_path, dirs_exist_ok=True)
    folder = index_folder(tmp_path, kind)
    (path,) = folder.rglob(name)
    damage(path)

    with caplog.at_level(logging.WARNING):
        rebuilt = answers(RETRIEVERS[kind](corpus, index_dir=tmp_path))
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert str(folder) in caplog.records[0].getMessage()
    assert rebuilt == expected[kind]

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert answers(RETRIEVERS[kind](corpus, index_dir=tmp_path)) == expected[kind]
    assert caplog.records == [], "the rebuilt index was not recorded whole"


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("kind", RETRIEVERS)
def test_an_index_written_on_a_full_disk_raises_naming_it_and_leaves_no_temporary_file(
    kind, corpus, tmp_path, monkeypatch
):
    monkeypatch.setattr(Path, "write_text", no_space)  # the index's JSON files and its manifest
    with pytest.raises(OSError) as failed:
        RETRIEVERS[kind](corpus, index_dir=tmp_path)
    assert failed.value.errno == errno.ENOSPC
    assert failed.value.filename.startswith(str(tmp_path / kind))
    assert list(tmp_path.rglob("*.tmp")) == []


@pytest.mark.server
def test_a_collection_on_a_chroma_server_holding_more_than_the_corpus_is_rebuilt_with_one_warning(
    corpus, tmp_path, caplog
):
    chroma = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    port = free_port()
    command = [chroma, "run", "--path", str(tmp_path / "server"), "--host", "127.0.0.1", "--port", str(port)]
    with served(command, port, tmp_path / "chroma.log"):
        url = f"http://127.0.0.1:{port}"
        DenseRetriever(corpus, chroma_url=url, key="one-key", embedder=EMBEDDER)
        with caplog.at_level(logging.WARNING):
            smaller = DenseRetriever(corpus[:10], chroma_url=url, key="one-key", embedder=EMBEDDER)
        assert [r.levelno for r in caplog.records] == [logging.WARNING]
        assert smaller.collection_name in caplog.records[0].getMessage()
        assert smaller.collection.count() == 10
