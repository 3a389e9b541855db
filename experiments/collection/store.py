"""A document collection on disk: its manifest, chunks, contexts cache and indexes, under
``<runs_dir>/collections/NAME/``.

    manifest.json   per document, keyed by its resolved path: its file name, SHA-256, ingestion options and
                    chunk ids; and the dense index in use with a digest of each vector's text
    chunks.jsonl    one chunk per line: id, document, source, page, kind, text, method, context ("" if none)
    contexts.json   the contextual-retrieval cache: sha256(model, document text, chunk text) -> context
    index/          the retriever's indexes (a chromadb store per dense index, BM25's arrays)

A chunk's indexed text is its context (if any), a blank line and its text, for BM25 and for the embedder alike;
a passage's title is ``"<document>, page <n>"``. A changed corpus gets a new chromadb collection (its name hashes
the corpus), but vectors whose text is unchanged are copied from the previous collection instead of being
embedded again, so re-ingesting one changed file embeds only that file's chunks. BM25 is rebuilt (it costs no
model call). Earlier indexes are then deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from ragscale.experiments.config import ConfigError
from ragscale.experiments.files import write_json, write_jsonl
from ragscale.programs.retrieval import (
    RETRIEVERS,
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    Passage,
    format_passage,
)
from ragscale.programs.retrieval.dense import stored_collection

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
CONTEXTS = "contexts.json"
MANIFEST_VERSION = 2


def _vector_digest(title: str, text: str) -> str:
    """Digest of the text a dense index embeds for a passage (what a program reads of it, ``format_passage``)."""
    return hashlib.sha256(format_passage(Passage(id="", title=title, text=text)).encode()).hexdigest()[:16]


class Collection:
    """A named set of ingested documents under `<runs_dir>/collections/NAME` (see the module docstring)."""

    def __init__(self, name: str, runs_dir: Path = Path("runs")) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ConfigError(f"invalid collection name {name!r}: use a plain folder name")
        self.name = name
        self.root = Path(runs_dir) / "collections" / name
        self.manifest: dict[str, Any] = {"version": MANIFEST_VERSION, "documents": {}}
        self.chunks: list[dict] = []
        self.contexts: dict[str, str] = {}
        self.embedded = self.reused = 0  # vectors embedded / copied by the last `retriever()` call
        if (self.root / MANIFEST).is_file():
            self.manifest = json.loads((self.root / MANIFEST).read_text(encoding="utf-8"))
        if (self.root / CHUNKS).is_file():
            with (self.root / CHUNKS).open(encoding="utf-8") as handle:
                self.chunks = [json.loads(line) for line in handle if line.strip()]
        if (self.root / CONTEXTS).is_file():
            self.contexts = json.loads((self.root / CONTEXTS).read_text(encoding="utf-8"))
        if self.manifest.get("version") != MANIFEST_VERSION:
            raise ConfigError(
                f"collection {name!r} at {self.root} was written by another version of ragscale (manifest version "
                f"{self.manifest.get('version')!r}, this one reads {MANIFEST_VERSION}): ingest its files into a new "
                "collection"
            )

    @property
    def exists(self) -> bool:
        return (self.root / MANIFEST).is_file()

    def save(self) -> None:
        """Write the chunks, the contexts and then the manifest, each file whole."""
        write_jsonl(self.root / CHUNKS, self.chunks)
        self.save_contexts()
        write_json(self.root / MANIFEST, self.manifest)

    def save_contexts(self) -> None:
        write_json(self.root / CONTEXTS, self.contexts)

    def by_id(self) -> dict[str, dict]:
        return {chunk["id"]: chunk for chunk in self.chunks}

    def corpus(self) -> list[dict]:
        """Retriever corpus entries: the indexed text is the chunk's context (if any), a blank line, its text."""
        return [
            {
                "id": c["id"],
                "title": f"{c['document']}, page {c['page']}",
                "text": f"{c['context']}\n\n{c['text']}" if c.get("context") else c["text"],
            }
            for c in self.chunks
        ]

    def index_is_current(self) -> bool:
        """Whether the manifest records a finished dense index of exactly the current chunks."""
        vectors = (self.manifest.get("index") or {}).get("vectors")
        return vectors == {e["id"]: _vector_digest(e["title"], e["text"]) for e in self.corpus()}

    def retriever(self, kind: str = "hybrid") -> Any:
        """The collection's retriever ("dense", "bm25" or "hybrid"), its indexes in `index/`.

        Passages missing from the dense index are embedded, except those whose text is unchanged since the index
        recorded in the manifest: their vectors are copied from it. `self.embedded` / `self.reused` count them.
        When the index changed, the manifest records the new one and the earlier indexes are deleted.
        """
        if kind not in RETRIEVERS:
            raise ConfigError(f"unknown retriever kind {kind!r}; valid kinds: {', '.join(RETRIEVERS)}")
        if not self.chunks:
            raise ConfigError(f"collection {self.name!r} at {self.root} has no chunks: run `ragscale ingest` first")
        corpus = self.corpus()
        index = self.root / "index"
        bm25 = BM25Retriever(corpus, index_dir=index) if kind != "dense" else None
        if kind == "bm25":
            return bm25
        dense = DenseRetriever(corpus, index_dir=index, build=False)
        self.reused = self._copy_unchanged_vectors(dense)
        self.embedded = dense.build()
        record = {
            "dense": dense.collection_name,
            "embedder": dense.embedder.name,
            "vectors": {p.id: _vector_digest(p.title, p.text) for p in dense.passages},
        }
        if self.manifest.get("index") != record:
            self.manifest["index"] = record
            self.save()
            self.drop_stale_indexes(dense.collection_name, getattr(bm25, "path", None))
        return dense if kind == "dense" else HybridRetriever(dense, bm25)

    def _copy_unchanged_vectors(self, dense: Any) -> int:
        """Copy into `dense` the vectors of the manifest's index whose passage text is unchanged; how many."""
        record = self.manifest.get("index") or {}
        previous = record.get("dense")
        if not previous or previous == dense.collection_name or record.get("embedder") != dense.embedder.name:
            return 0
        digests = record.get("vectors", {})
        missing = set(dense.missing_ids())
        wanted = [
            p.id for p in dense.passages if p.id in missing and digests.get(p.id) == _vector_digest(p.title, p.text)
        ]
        copied = 0
        with stored_collection(self.root / "index", previous) as source:
            if source is None:
                return 0
            for start in range(0, len(wanted), 1000):
                got = source.get(ids=wanted[start : start + 1000], include=["embeddings", "metadatas"])
                if got["ids"]:
                    dense.add(got["ids"], got["embeddings"], got["metadatas"])
                    copied += len(got["ids"])
        if copied:
            log.info("reused %d vectors of %s", copied, previous)
        return copied

    def drop_stale_indexes(self, keep: str | None, keep_bm25: Path | None = None) -> None:
        """Delete dense stores other than `keep` (and the single store of an earlier layout, `chroma/`) and, when
        `keep_bm25` is given, the other BM25 indexes."""
        index = self.root / "index"
        shutil.rmtree(index / "chroma", ignore_errors=True)
        stale = [path for path in (index / "dense").glob("*") if path.name != keep]
        if keep_bm25 is not None:
            stale += [path for path in (index / "bm25").glob("*") if path.resolve() != Path(keep_bm25).resolve()]
        for path in stale:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
