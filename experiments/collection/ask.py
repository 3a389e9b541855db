"""Asking a collection: any method over its hybrid retriever (optionally reranked by the LM grader), with the
sources (document, page, kind) of the passages the method used."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragscale.experiments.collection.store import Collection
from ragscale.experiments.config import DEFAULTS, ConfigError
from ragscale.programs import build_program
from ragscale.programs.retrieval.rerank import Reranker


def sources(passages: Sequence[Any], chunks: Mapping[str, Mapping]) -> list[dict]:
    """(document, page, kind, id, source) of each passage used, in the order given; passages are dicts or
    Passages. `source` is the document's path, which tells apart two documents of one name."""
    found = []
    for passage in passages or []:
        pid = passage.get("id") if isinstance(passage, Mapping) else getattr(passage, "id", None)
        chunk = chunks.get(pid)
        if chunk is not None:
            found.append(
                {
                    "document": chunk["document"],
                    "page": chunk["page"],
                    "kind": chunk["kind"],
                    "id": pid,
                    "source": chunk.get("source", ""),
                }
            )
    return found


def ask(
    question: str,
    *,
    collection: str,
    runs_dir: Path = Path("runs"),
    method: str = "rag",
    docs: int = DEFAULTS["docs"],
    iterations: int = DEFAULTS["iterations"],
    rerank_depth: int = 0,
    rerank_order: str = "fused",
    retriever_kind: str = "hybrid",
) -> dict[str, Any]:
    """Answer `question` over `collection` with `method`, using the LM configured in `dspy.settings`.

    Returns {"answer", "sources": [{"document", "page", "kind", "id"}, ...]}. `rerank_depth` > 0 puts the LM
    grader (`Reranker`) over that many hybrid candidates, ordered by `rerank_order` (`Reranker`'s `order`).
    """
    store = Collection(collection, runs_dir)
    if not store.exists:
        raise ConfigError(f"no collection {collection!r} under {store.root.parent}: run `ragscale ingest` first")
    retriever = store.retriever(retriever_kind)
    if rerank_depth > 0:
        retriever = Reranker(retriever, depth=rerank_depth, order=rerank_order)

    try:
        program = build_program(method, retriever, k=docs, iterations=iterations)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    prediction = program(question=question)
    return {"answer": str(prediction.answer), "sources": sources(getattr(prediction, "passages", []), store.by_id())}
