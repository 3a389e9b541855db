"""Dense retrieval: our own embeddings in a chromadb collection (cosine space).

chromadb's default embedding function downloads an ONNX model, so it is never used: vectors are passed with
``embeddings=`` on add and ``query_embeddings=`` on query, and the collection is created with
``embedding_function=None``.

The collection name is ``ragscale-<corpus key>-<hash>``: the corpus's key (its digest when the caller has one, else
a hash of its ids, titles and texts) and a hash of the embedder's name, so a changed corpus or embedder gets a new
collection. Indexing is incremental and resumable: on open the retriever asks the collection how many passages it
holds and, when that is fewer than the corpus, which; it then embeds and adds only the missing passages, batch by
batch, so a build killed halfway is completed by the next run without re-embedding.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ragscale.process import REQUEST_TIMEOUT_S
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


def chroma_client(
    index_dir: Path | None = None, chroma_url: str | None = None, *, timeout_s: float = REQUEST_TIMEOUT_S
) -> Any:
    """A chromadb client: ``HttpClient`` for ``chroma_url`` (``http://host:port``), else a ``PersistentClient``
    stored in ``index_dir/chroma``. Telemetry is off. A server's every request after the client's own checks of its
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
    if index_dir is None:
        raise ValueError("a dense index needs index_dir (a folder for chromadb) or chroma_url")
    path = Path(index_dir) / "chroma"
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


class DenseRetriever:
    """``retriever(query, k)`` -> passages by cosine similarity of MiniLM embeddings, most similar first.

    Args:
        corpus: entries ``{"id", "title", "text"}``; a repeated id keeps its first entry.
        index_dir: folder holding the chromadb store (``index_dir/chroma``); ignored when ``chroma_url`` is given.
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
        self.by_id = {p.id: p for p in self.passages}
        self.embedder = get_embedder(embedder)
        self.batch_size = batch_size
        base = key if key is not None else corpus_key(self.passages)
        self.collection_name = f"ragscale-{index_key(base, 'dense', self.embedder.name)}"
        self.client = chroma_client(index_dir, chroma_url, timeout_s=timeout_s)
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
            self.collection.modify(configuration={"hnsw": {"ef_search": EF_SEARCH}})  # a collection made before
        if build:
            self.build(show_progress=progress)

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
        for start in range(0, total, self.batch_size):
            batch = [self.by_id[i] for i in missing[start : start + self.batch_size]]
            vectors = self.embedder.embed([format_passage(p) for p in batch])
            self.collection.add(
                ids=[p.id for p in batch],
                embeddings=vectors,
                metadatas=[{"title": p.title} for p in batch],
            )
            if progress is not None:
                progress(start + len(batch), total)
            if bar is not None:
                bar.update(len(batch))
        if bar is not None:
            bar.close()
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
