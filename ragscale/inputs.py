"""What a program runs on: the LM and its adapter, the questions, the corpus and a retriever over it.

Each call is a thin one into the layers below (``programs.lm``, ``programs.retrieval``, ``data``), with the defaults a
user would otherwise have to know: the adapter a small local model needs, the shared data folder, where indexes live.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

INDEX_DIR = Path("runs/indexes")
"""Where ``retriever`` builds its indexes unless told otherwise (``ragscale run``'s, under its runs directory)."""


def configure(lm: Any = None, *, adapter: Any = None, **lm_options: Any):
    """Set the LM and adapter every ragscale and DSPy call uses from now on (``dspy.configure``); returns the LM.

    ``lm`` is a name ``load_lm`` takes (a preset such as ``"qwen2.5-coder-0.5b"``, the default, a model folder, a
    ``.gguf`` file, or ``"openai/<model>"`` with ``api_base=``) or any ``dspy.LM``. ``adapter`` is a name of
    ``ragscale.programs.lm.ADAPTERS`` (``field``, ``field-prefill``, ``chat``, ``json``) or a ``dspy.Adapter``; by
    default ragscale's ``FieldAdapter`` (one output field a call, choices constrained: what small local models
    parse), for any LM. ``lm_options`` go to ``load_lm``.
    """
    import dspy

    from ragscale.programs.lm import DEFAULT_LM, load_lm, make_adapter

    if lm is None or isinstance(lm, str | Path):
        lm = load_lm(str(lm or DEFAULT_LM), **lm_options)
    elif lm_options:
        raise TypeError(f"options {sorted(lm_options)} are load_lm's: give a model name with them, not a loaded LM")
    if adapter is None or isinstance(adapter, str):
        adapter = make_adapter(adapter or "field")
    dspy.configure(lm=lm, adapter=adapter)
    return lm


def load_corpus(name: str | Path, data_dir: str | Path | None = None):
    """A corpus to search (``data.corpora``): a dataset's every paragraph (``"hotpotqa"``, ...), ``"all"`` of them,
    or a JSONL file (FlashRAG's ``{id, contents}`` or ``{id, title, text}``); ``data_dir`` defaults to the shared
    datasets folder (``RAGSCALE_DATA_DIR``)."""
    from ragscale.data import default_data_dir
    from ragscale.data import load_corpus as load

    return load(str(name), Path(data_dir) if data_dir is not None else default_data_dir())


def load_split(dataset: str, split: str = "dev", data_dir: str | Path | None = None) -> list:
    """A dataset's questions as ``dspy.Example`` objects (``question``, ``answers``, ``paragraphs``, ...): ``dataset``
    one of ``ragscale.data.DATASETS`` and ``split`` ``"train"`` or ``"dev"``."""
    from ragscale.data import load_split as load

    return load(dataset, split, Path(data_dir) if data_dir is not None else None)


def retriever(
    source: Any,
    *,
    kind: str = "hybrid",
    index_dir: str | Path = INDEX_DIR,
    data_dir: str | Path | None = None,
    chroma_url: str | None = None,
    progress: bool = True,
):
    """A retriever, ``retriever(query, k) -> list[Passage]``, over ``source``:

    - a corpus from ``load_corpus``, a dataset name (``"hotpotqa"``, ``"all"``) or a JSONL file's path;
    - a list of texts, or of dicts with a ``text`` (and ``title``, ``id`` when they have them);
    - a search function ``(query, k) -> list[str | dict]`` of your own, used as it is.

    ``kind`` is ``"hybrid"`` (BM25 and dense, fused by RRF), ``"bm25"`` or ``"dense"``. Indexes are built once under
    ``index_dir``, named by the corpus's sha256, and found there again. A program over a corpus retriever can be
    logged as an MLflow model (the corpus travels with it); one over a function cannot.
    """
    from ragscale.experiments.model import Searched
    from ragscale.programs.retrieval import build_retriever
    from ragscale.programs.retrieval.function import FunctionRetriever, is_plain_function

    if is_plain_function(source):
        return FunctionRetriever(source)
    corpus = _corpus(source, data_dir)
    built = build_retriever(corpus.passages, kind=kind, index_dir=Path(index_dir), chroma_url=chroma_url,
                            key=corpus.key, progress=progress)  # fmt: skip
    return CorpusRetriever(built, Searched(corpus, kind, Path(index_dir).resolve(), chroma_url,
                                           Path(data_dir).resolve() if data_dir is not None else None))  # fmt: skip


def _corpus(source: Any, data_dir: str | Path | None):
    """``source`` as a ``Corpus``; anything that is not one of ``retriever``'s sources raises ``TypeError``."""
    from ragscale.data.corpora import Corpus
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

    def __init__(self, inner, searched) -> None:
        self.inner, self.searched = inner, searched

    def __call__(self, query: str, k: int):
        return self.inner(query, k)

    def __deepcopy__(self, memo: dict) -> CorpusRetriever:
        return self

    def __repr__(self) -> str:
        corpus = self.searched.corpus
        return f"CorpusRetriever({self.searched.kind}, {corpus.name!r}, {len(corpus)} passages)"
