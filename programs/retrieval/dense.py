"""Dense retrieval: our own embeddings in a chromadb collection (cosine space).

chromadb's default embedding function downloads an ONNX model, so it is never used: vectors are passed with
``embeddings=`` on add and ``query_embeddings=`` on query, and the collection is created with
``embedding_function=None``.

The collection name is ``ragscale-<corpus key>-<hash>``: the corpus's key (its digest when the caller has one, else
a hash of its ids, titles and texts) and a hash of the embedder's name, so a changed corpus or embedder gets a new
collection. Each collection has a chromadb store of its own, ``index_dir/dense/<collection name>/``, so a broken
store is rebuilt without touching another corpus's index.

A store is checked against its manifest (``manifest.py``) before chromadb opens it, and its collection's count
against the manifest's after. Every file is recorded by its size and checksum but two kinds chromadb rewrites when it
only reads the store: its sqlite file, whose rows are hashed instead (all but ``VOLATILE_TABLES``, which gain a row
per client), and ``REWRITTEN_ON_LOAD``, recorded by size. A store that is not as recorded, or has no manifest, is
deleted and built again with one warning. On a chromadb server (``chroma_url``) there are no files to check: a
collection holding more passages than the corpus is dropped and built again.

Indexing is incremental and resumable: the manifest is dropped before the first vector is added and written again
when the build ends, and also when it stops between two batches (Ctrl-C, a failed embedding), since chromadb's
store is then whole. The next open then asks the collection which passages it holds and embeds and adds only the
missing ones, batch by batch. A process killed inside chromadb's write leaves no manifest, and its store is
rebuilt.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ragscale.process import REQUEST_TIMEOUT_S
from ragscale.programs.retrieval import manifest
from ragscale.programs.retrieval.embedder import MiniLMEmbedder, get_embedder
from ragscale.programs.retrieval.passage import (
    Passage,
    corpus_key,
    corpus_passages,
    format_passage,
    index_key,
    progress_bar,
)

logger = logging.getLogger(__name__)

EF_SEARCH = 800
"""Candidates the HNSW graph keeps while searching. chromadb's default, 100, misses a share of exact search's top 10
that grows with the corpus; 800 keeps exact search's top 10 up to a million passages for a few milliseconds a query
(``benchmarks/retrieval_scale.py`` measures it; ``docs/retrieval.md``)."""

FORMAT = "chromadb-1"
"""The manifest's format: a chromadb 1.x store holding one collection."""
SQLITE = "chroma.sqlite3"
REWRITTEN_ON_LOAD = frozenset({"length.bin"})
"""HNSW files chromadb writes again, from memory it never set, each time it loads the index: recorded by size."""
VOLATILE_TABLES = frozenset({"acquire_write"})
"""Tables of chromadb's sqlite file that gain a row each time a client opens the store: not hashed."""


def chroma_client(
    path: Path | None = None, chroma_url: str | None = None, *, timeout_s: float = REQUEST_TIMEOUT_S
) -> Any:
    """A chromadb client: ``HttpClient`` for ``chroma_url`` (``http://host:port``), else a ``PersistentClient``
    stored in the folder ``path``. Telemetry is off. A server's every request after the client's own checks of its
    tenant waits at most ``timeout_s`` for an answer: chromadb's HTTP session has no timeout of its own, so a server
    that stalls would hold a query, or an index build, for good."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if chroma_url:
        url = urlparse(chroma_url if "://" in chroma_url else f"http://{chroma_url}")
        if not url.hostname:
            raise ValueError(f"chroma_url {chroma_url!r} has no host; expected http://host:port")
        ssl = url.scheme == "https"
        port = url.port or (443 if ssl else 8000)
        client = chromadb.HttpClient(host=url.hostname, port=port, ssl=ssl, settings=settings)
        client._server._session.timeout = timeout_s  # httpx's, which chromadb makes with none and offers no setting for
        return client
    if path is None:
        raise ValueError("a dense index needs index_dir (a folder for chromadb) or chroma_url")
    Path(path).mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def measure_store_file(path: Path) -> dict[str, Any]:
    """What a store's manifest records of one of its files: chromadb rewrites some when it only reads the store
    (see the module docstring), so those are recorded by what stays fixed."""
    if path.name == SQLITE:
        return {"size": None, "sha256": _rows_digest(path)}
    if path.name in REWRITTEN_ON_LOAD:
        return {"size": path.stat().st_size, "sha256": None}
    return manifest.whole_file(path)


def _rows_digest(path: Path) -> str:
    """SHA-256 of every row of every table of a chromadb sqlite file but those chromadb writes on open."""
    digest = hashlib.sha256()
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = connection.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
            ).fetchall()
            for name, sql in tables:
                digest.update(f"{name}\0{sql}\0".encode())
                if name in VOLATILE_TABLES or (sql or "").upper().startswith("CREATE VIRTUAL"):
                    continue  # a virtual table's rows live in its shadow tables, hashed as tables
                rows = connection.execute(f'SELECT * FROM "{name}"')
                while batch := rows.fetchmany(4096):
                    digest.update(repr(batch).encode())
        finally:
            connection.close()
    except sqlite3.DatabaseError as error:
        raise manifest.BrokenIndexError(f"{path.name} cannot be read ({error})") from None
    return digest.hexdigest()


@contextmanager
def stored_collection(index_dir: Path, name: str) -> Iterator[Any]:
    """The collection ``name`` of its store under ``index_dir`` for the block, or None where there is no store of
    that name or it is not as its manifest records; the store is closed after the block."""
    path = Path(index_dir) / "dense" / name
    try:
        if not path.is_dir():
            raise manifest.BrokenIndexError("there is none")
        manifest.check(path, format=FORMAT, measure=measure_store_file)
    except manifest.BrokenIndexError as error:
        logger.info("dense index %s is not read: %s", path, error)
        yield None
        return
    client = chroma_client(path)
    try:
        yield client.get_collection(name)
    finally:
        client.close()


class DenseRetriever:
    """``retriever(query, k)`` -> passages by cosine similarity of MiniLM embeddings, most similar first.

    Args:
        corpus: entries ``{"id", "title", "text"}``; a repeated id keeps its first entry.
        index_dir: folder holding the chromadb store (``index_dir/dense/<collection>``); ignored when
            ``chroma_url`` is given.
        embedder: an ``EMBEDDERS`` name or an embedder object with ``name`` and ``embed(texts)``.
        chroma_url: use a chromadb server (``chroma run``) at this URL instead of the embedded store.
        timeout_s: how long each request to that server waits for its answer.
        batch_size: passages embedded and added per step; each step is durable, which makes a build resumable.
        build: index missing passages now (default); with ``False`` call ``build()`` yourself.
        key: the corpus's digest (``data.corpora.Corpus.key``); without it the passages are hashed here.
        progress: draw a progress bar (passages/s, ETA) while embedding.

    The text embedded for a passage is what a program reads of it (``format_passage``); ``score`` is the cosine
    similarity.
    """

    def __init__(
        self,
        corpus: Sequence[Mapping],
        *,
        index_dir: Path | None = None,
        embedder: str | MiniLMEmbedder = "minilm",
        chroma_url: str | None = None,
        batch_size: int = 512,
        build: bool = True,
        key: str | None = None,
        progress: bool = False,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.passages = corpus_passages(corpus)
        if not self.passages:
            raise ValueError("cannot build a dense index over an empty corpus")
        if index_dir is None and not chroma_url:
            raise ValueError("a dense index needs index_dir (a folder for chromadb) or chroma_url")
        self.by_id = {p.id: p for p in self.passages}
        self.embedder = get_embedder(embedder)
        self.batch_size = batch_size
        base = key if key is not None else corpus_key(self.passages)
        self.collection_name = f"ragscale-{index_key(base, 'dense', self.embedder.name)}"
        self.chroma_url, self.timeout_s = chroma_url, timeout_s
        self.path = None if chroma_url else Path(index_dir) / "dense" / self.collection_name
        self.recorded: int | None = None  # the passages its manifest records, while it describes the store
        self._open()
        if build:
            self.build(show_progress=progress)

    def _open(self) -> None:
        """Open the collection; a store not as its manifest records, or a collection that does not fit its
        manifest or the corpus, is emptied with one warning, to be built again."""
        problem = self._check_files()
        if problem is None:
            self._connect()
            problem = self._check_count()
            if problem is not None and self.path is not None:
                self.client.close()
        if problem is not None:
            where = self.path or f"{self.collection_name} at {self.chroma_url}"
            logger.warning("dense index %s is broken: %s; rebuilding it", where, problem)
            self.recorded = None
            if self.path is None:
                self.client.delete_collection(self.collection_name)
            else:
                manifest.remove(self.path)
            self._connect()
        if self.recorded is None:
            self._record()

    def _check_files(self) -> str | None:
        if self.path is None or not self.path.exists():
            return None
        try:
            self.recorded = manifest.check(self.path, format=FORMAT, measure=measure_store_file)["passages"]
        except manifest.BrokenIndexError as error:
            return str(error)
        return None

    def _check_count(self) -> str | None:
        count = self.collection.count()
        if self.recorded is not None and count != self.recorded:
            return f"it holds {count} passages, its manifest says {self.recorded}"
        if count > len(self.passages):
            return f"it holds {count} passages, the corpus {len(self.passages)}"
        return None

    def _connect(self) -> None:
        self.client = chroma_client(self.path, self.chroma_url, timeout_s=self.timeout_s)
        self.collection = self.client.get_or_create_collection(
            self.collection_name,
            configuration={"hnsw": {"space": "cosine", "ef_search": EF_SEARCH}},
            metadata={"embedder": self.embedder.name, "passages": len(self.passages)},
            embedding_function=None,
        )
        with warnings.catch_warnings():  # chromadb calls a collection without an embedding function "legacy"
            warnings.filterwarnings("ignore", "legacy embedding function config", DeprecationWarning)
            hnsw = self.collection.configuration.get("hnsw") or {}
        if hnsw.get("ef_search") != EF_SEARCH:
            self._unrecord()
            self.collection.modify(configuration={"hnsw": {"ef_search": EF_SEARCH}})  # a collection made before

    def _record(self) -> None:
        """Write the local store's manifest: its files as they are now and the passages it holds."""
        if self.path is None:
            return
        files = sorted(
            p.relative_to(self.path).as_posix()
            for p in self.path.rglob("*")
            if p.is_file() and not p.name.startswith(manifest.MANIFEST)
        )
        count = self.collection.count()
        manifest.write(self.path, format=FORMAT, passages=count, files=files, measure=measure_store_file)
        self.recorded = count

    def _unrecord(self) -> None:
        """Drop the local store's manifest before it is written to: until it is recorded again it is partial."""
        if self.path is not None:
            (self.path / manifest.MANIFEST).unlink(missing_ok=True)
        self.recorded = None

    def add(self, ids: Sequence[str], embeddings: Any, metadatas: Sequence[Mapping]) -> None:
        """Add vectors to the collection; ``build`` records the store again when it ends."""
        self._unrecord()
        self.collection.add(ids=list(ids), embeddings=embeddings, metadatas=list(metadatas))

    def missing_ids(self) -> list[str]:
        """Corpus ids not yet in the collection, in corpus order (none, at once, when it holds them all)."""
        if self.collection.count() >= len(self.passages):
            return []
        present: set[str] = set()
        page = 5000
        offset = 0
        while True:
            got = self.collection.get(include=[], limit=page, offset=offset)["ids"]
            present.update(got)
            if len(got) < page:
                break
            offset += page
        return [p.id for p in self.passages if p.id not in present]

    def build(self, progress: Callable[[int, int], None] | None = None, *, show_progress: bool = False) -> int:
        """Embed and add the passages missing from the collection; returns how many were added.

        ``progress(done, total)`` is called after each batch; ``show_progress`` draws a bar (passages/s, ETA).
        """
        missing = self.missing_ids()
        # Shortest first: each embedding batch then holds passages of similar length (little padding), as in
        # one embed() call over the whole corpus; the order passages are added in does not matter to chromadb.
        missing.sort(key=lambda i: len(self.by_id[i].title) + len(self.by_id[i].text))
        total = len(missing)
        if total:
            logger.info("indexing %d of %d passages into %s", total, len(self.passages), self.collection_name)
        started = time.perf_counter()
        bar = progress_bar(total, "dense index", show_progress and total > 0)
        adding = False
        try:
            for start in range(0, total, self.batch_size):
                batch = [self.by_id[i] for i in missing[start : start + self.batch_size]]
                vectors = self.embedder.embed([format_passage(p) for p in batch])
                adding = True
                self.add([p.id for p in batch], vectors, [{"title": p.title} for p in batch])
                adding = False
                if progress is not None:
                    progress(start + len(batch), total)
                if bar is not None:
                    bar.update(len(batch))
        finally:
            if bar is not None:
                bar.close()
            # Stopped between two batches (Ctrl-C, a failed embedding), the store is whole and is recorded, so the
            # next open completes it; stopped inside chromadb's add, it is left unrecorded and is rebuilt.
            if self.recorded is None and not adding:
                self._record()
        if total:
            logger.info("indexed %d passages in %.1f s", total, time.perf_counter() - started)
        return total

    def __call__(self, query: str, k: int) -> list[Passage]:
        if k <= 0:
            return []
        vector = self.embedder.embed([query])
        result = self.collection.query(
            query_embeddings=vector, n_results=min(k, len(self.passages)), include=["distances"]
        )
        return [
            Passage(id=i, title=self.by_id[i].title, text=self.by_id[i].text, score=1.0 - float(d))
            for i, d in zip(result["ids"][0], result["distances"][0], strict=True)
            if i in self.by_id
        ]

    def __deepcopy__(self, memo: dict) -> DenseRetriever:
        return self

    def __repr__(self) -> str:
        return f"DenseRetriever({self.collection_name}, passages={len(self.passages)}, embedder={self.embedder.name})"
