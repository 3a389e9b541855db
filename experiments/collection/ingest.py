"""Ingestion: files into a named collection, each unchanged file skipped, each changed one replaced.

Documents are keyed by their resolved path, so two files of one name in different folders are two documents;
their file name is what answers cite. A file whose bytes (SHA-256) and options are unchanged is skipped; a changed
one has its chunks replaced; a file that cannot be read (corrupt, encrypted, empty, unsupported) is reported with
its error and the others are still ingested. With ``contextual=True`` every chunk gets a context from the LM
(``contextualize.py``). The collection is saved after each document, so an interrupted ingestion keeps what
finished; the index is then brought up to date (``store.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragscale.data.documents import (
    DEFAULT_MAX_TOKENS,
    SUFFIXES,
    DocumentError,
    document_source,
    file_sha256,
    folder_documents,
    load_document,
)
from ragscale.experiments.collection.contextualize import contextualize_chunks
from ragscale.experiments.collection.store import Collection

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    """What one `ingest` call did, by file: added, replaced, unchanged, failed (file -> error message); how many
    contexts the LM wrote and how many came from the cache; how many vectors were embedded and how many reused."""

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    contexts_written: int = 0
    contexts_cached: int = 0
    embedded: int = 0
    reused: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced)


def ingest(
    paths: Sequence[str | Path],
    *,
    collection: str,
    runs_dir: Path = Path("runs"),
    contextual: bool = False,
    model: str = "",
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    describer: Any = None,
    ocr: bool = True,
    max_document_chars: int = 6000,
    threads: int = 4,
    build_index: bool = True,
) -> IngestReport:
    """Ingest `paths` (files, or folders: their supported files, recursively) into `collection` (see the module
    docstring). With `contextual`, the LM (and adapter) configured in `dspy.settings` writes the contexts and
    `model` names it in the cache key."""
    store = Collection(collection, runs_dir)
    report = IngestReport()
    options = {
        "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
        "contextual": contextual,
        "model": model if contextual else "",
        "pictures": getattr(describer, "method", None) or ("ocr" if ocr else "caption"),
    }
    documents = store.manifest.setdefault("documents", {})
    reading = {"max_tokens": options["max_tokens"], "describer": describer, "ocr": ocr}
    if count_tokens is not None:
        reading["count_tokens"] = count_tokens
    for path in _files(paths, report):
        read = _read_if_changed(path, documents, options, reading, report)
        if read is None:
            continue
        digest, previous, chunks = read
        contexts = [""] * len(chunks)
        if contextual:
            contexts = _contexts(chunks, store, report, model, max_document_chars, threads)
        for chunk, context in zip(chunks, contexts, strict=True):
            chunk["context"] = context
        (report.replaced if previous else report.added).append(str(path))
        _keep(store, documents, path, digest, options, chunks)
        log.info("%s: %d chunks%s", path, len(chunks), " (contextual)" if contextual else "")
    report.chunks = len(store.chunks)
    if report.changed or not store.exists:
        store.save()
    if build_index and store.chunks and not store.index_is_current():
        store.retriever()  # embeds what the index lacks (after a change, only the changed files' chunks)
        report.embedded, report.reused = store.embedded, store.reused
    return report


def _files(paths: Sequence[str | Path], report: IngestReport) -> list[Path]:
    """The files ``paths`` name, a folder's supported files in its place; a folder without any is a failure."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            files.append(path)
        elif found := folder_documents(path):
            files.extend(found)
        else:
            report.failed[str(path)] = f"{path}: a folder without {', '.join(SUFFIXES)} files"
            log.error("%s", report.failed[str(path)])
    return files


def _read_if_changed(
    path: Path, documents: dict, options: dict, reading: dict, report: IngestReport
) -> tuple[str, dict | None, list[dict]] | None:
    """A file's digest, its entry in the manifest's ``documents`` and its chunks, read with ``reading``'s keywords;
    None for a file whose bytes and options are those already ingested (reported unchanged) or that cannot be read
    (reported failed)."""
    try:
        digest = file_sha256(path) if path.is_file() else ""
        previous = documents.get(document_source(path))
        if previous and previous["sha256"] == digest and previous["options"] == options:
            report.unchanged.append(str(path))
            return None
        return digest, previous, [c.to_dict() for c in load_document(path, **reading)]
    except DocumentError as error:
        report.failed[str(path)] = str(error)
        log.error("%s", error)
        return None


def _contexts(
    chunks: list[dict], store: Collection, report: IngestReport, model: str, max_document_chars: int, threads: int
) -> list[str]:
    """Each chunk's context, from the collection's cache or written by the LM; counted in ``report``."""
    before = len(store.contexts)
    contexts = contextualize_chunks(
        chunks,
        model=model,
        cache=store.contexts,
        max_document_chars=max_document_chars,
        threads=threads,
        checkpoint=store.save_contexts,
    )
    report.contexts_written += len(store.contexts) - before
    report.contexts_cached += len(chunks) - (len(store.contexts) - before)
    return contexts


def _keep(store: Collection, documents: dict, path: Path, digest: str, options: dict, chunks: list[dict]) -> None:
    """A document's chunks in place of its earlier ones, its manifest entry, and the collection saved: durable per
    document, so an interrupted ingestion keeps what finished."""
    source = document_source(path)
    store.chunks = [c for c in store.chunks if c.get("source") != source] + chunks
    documents[source] = {
        "name": path.name,
        "sha256": digest,
        "options": options,
        "chunks": [c["id"] for c in chunks],
    }
    store.save()
