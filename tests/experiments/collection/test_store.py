"""A collection on disk: its name, its chunks, contexts and manifest read back, the text its indexes search, and
its retriever."""

import json

import pytest

from ragscale.experiments.collection import Collection, ingest
from ragscale.experiments.config import ConfigError


def chunk(i: int, context: str = "") -> dict:
    return {"id": f"c{i}", "document": "log.md", "source": "/docs/log.md", "page": 1 + i // 6, "kind": "text",
            "text": f"Entry {i}: the harbour logged {i} arrivals of ship number {100 + i}.", "method": "text",
            "context": context}  # fmt: skip


@pytest.mark.parametrize("name", ["", "a/b", ".hidden"])
def test_a_collection_name_must_be_a_plain_folder_name(name, tmp_path):
    with pytest.raises(ConfigError, match="invalid collection name"):
        Collection(name, tmp_path)


def test_saved_chunks_and_contexts_are_read_back_and_indexed_with_their_context_first(tmp_path):
    store = Collection("c", tmp_path)
    assert not store.exists
    store.chunks = [chunk(0, context="From the harbour log."), chunk(7)]
    store.contexts = {"key": "From the harbour log."}
    store.save()
    again = Collection("c", tmp_path)
    assert again.exists and again.chunks == store.chunks and again.contexts == store.contexts
    first, second = again.corpus()
    assert first == {"id": "c0", "title": "log.md, page 1", "text": f"From the harbour log.\n\n{chunk(0)['text']}"}
    assert second == {"id": "c7", "title": "log.md, page 2", "text": chunk(7)["text"]}
    assert not again.index_is_current()  # no dense index was built


def test_the_retriever_refuses_an_unknown_kind_and_an_empty_collection_and_searches_the_chunks(tmp_path):
    store = Collection("c", tmp_path)
    with pytest.raises(ConfigError, match="has no chunks: run `ragscale ingest` first"):
        store.retriever("bm25")
    store.chunks = [chunk(i) for i in range(12)]
    with pytest.raises(ConfigError, match="valid kinds: dense, bm25, hybrid"):
        store.retriever("splade")
    assert store.retriever("bm25")("ship number 107", 1)[0].id == "c7"


def test_a_collection_of_another_manifest_version_fails_naming_it_and_the_fix(documents, tmp_path):
    runs = tmp_path / "runs"
    ingest([documents / "report.md"], collection="c", runs_dir=runs, build_index=False)
    manifest = runs / "collections" / "c" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": 1}))
    with pytest.raises(ConfigError, match=r"collection 'c' at .*manifest version 1.* new collection"):
        ingest([documents / "report.md"], collection="c", runs_dir=runs, build_index=False)
