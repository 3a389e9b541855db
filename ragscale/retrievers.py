"""A retriever over whatever a user has: a corpus, a dataset's name, a JSONL file, a list of texts or dicts, or a
search function of their own; over a corpus, it knows what it searches, so that a program over it can travel as an
MLflow model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragscale.data.corpora import Corpus
from ragscale.experiments.model import Searched
from ragscale.inputs import load_corpus

if TYPE_CHECKING:
    from ragscale.programs.retrieval import Passage, Retriever
    from ragscale.programs.retrieval.function import FunctionRetriever

INDEX_DIR = Path("runs/indexes")
"""Where ``retriever`` builds its indexes unless told otherwise (``ragscale run``'s, under its runs directory)."""


def retriever(
    source: Any,
    *,
    kind: str = "hybrid",
    index_dir: str | Path = INDEX_DIR,
    data_dir: str | Path | None = None,
    chroma_url: str | None = None,
    progress: bool = True,
) -> CorpusRetriever | FunctionRetriever:
    """A retriever, ``retriever(query, k) -> list[Passage]``, over ``source``:

    - a corpus from ``load_corpus``, a dataset name (``"hotpotqa"``, ``"all"``) or a JSONL file's path;
    - a list of texts, or of dicts with a ``text`` (and ``title``, ``id`` when they have them);
    - a search function ``(query, k) -> list[str | dict]`` of your own, used as it is.

    ``kind`` is ``"hybrid"`` (BM25 and dense, fused by RRF), ``"bm25"`` or ``"dense"``. Indexes are built once under
    ``index_dir``, named by the corpus's sha256, and found there again. A program over a corpus retriever can be
    logged as an MLflow model (the corpus travels with it); one over a function cannot.
    """
    from ragscale.programs.retrieval import build_retriever
    from ragscale.programs.retrieval.function import FunctionRetriever, is_plain_function

    if is_plain_function(source):
        return FunctionRetriever(source)
    corpus = _corpus(source, data_dir)
    built = build_retriever(corpus.passages, kind=kind, index_dir=Path(index_dir), chroma_url=chroma_url,
                            key=corpus.key, progress=progress)  # fmt: skip
    return CorpusRetriever(built, Searched(corpus, kind, Path(index_dir).resolve(), chroma_url,
                                           Path(data_dir).resolve() if data_dir is not None else None))  # fmt: skip


def _corpus(source: Any, data_dir: str | Path | None) -> Corpus:
    """``source`` as a ``Corpus``; anything that is not one of ``retriever``'s sources raises ``TypeError``."""
    from ragscale.programs.retrieval.function import as_passage

    if isinstance(source, Corpus):
        return source
    if isinstance(source, str | Path):
        return load_corpus(source, data_dir)
    if isinstance(source, Iterable) and not isinstance(source, Mapping):
        corpus = Corpus("passages", [])
        for number, item in enumerate(source):
            try:
                passage = as_passage(item)
            except TypeError as exc:
                raise TypeError(f"passage {number}: {exc}") from None
            if not passage.text.strip():
                raise ValueError(f"passage {number} has no text")
            corpus.add(passage.id, passage.title, passage.text)
        if not corpus.passages:
            raise ValueError("the list of passages is empty")
        return corpus
    raise TypeError(
        "retriever() takes a corpus, a dataset name, a JSONL path, a list of texts or dicts, or a search function "
        f"(query, k) -> list; got {type(source).__name__}"
    )


class CorpusRetriever:
    """A built retriever and what it searches (``searched``: the corpus, the kind, where its indexes live), so
    that a program over it can be logged as an MLflow model; shared, not copied, with a program."""

    def __init__(self, inner: Retriever, searched: Searched) -> None:
        self.inner, self.searched = inner, searched

    def __call__(self, query: str, k: int) -> list[Passage]:
        return self.inner(query, k)

    def __getattr__(self, name: str) -> Any:  # the built retriever's parts (HyDE searches a hybrid's dense side)
        if name in ("inner", "searched"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __deepcopy__(self, memo: dict) -> CorpusRetriever:
        return self

    def __repr__(self) -> str:
        corpus = self.searched.corpus
        return f"CorpusRetriever({self.searched.kind}, {corpus.name!r}, {len(corpus)} passages)"
