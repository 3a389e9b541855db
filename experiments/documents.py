"""Document collections: `ragscale ingest` files into a named collection, `ragscale ask` it a question.

A collection lives in `<runs_dir>/collections/NAME/`:

    manifest.json   per document, keyed by its resolved path: its file name, SHA-256, ingestion options and
                    chunk ids; and the dense index in use with a digest of each vector's text
    chunks.jsonl    one chunk per line: id, document, source, page, kind, text, method, context ("" if none)
    contexts.json   the contextual-retrieval cache: sha256(model, document text, chunk text) -> context
    index/          the retriever's indexes (chromadb + BM25 JSON)

Documents are keyed by their resolved path, so two files of one name in different folders are two documents;
their file name is what answers cite. Ingestion (`ingest`): a file whose bytes (SHA-256) and options are
unchanged is skipped; a changed one has its chunks replaced; a file that cannot be read (corrupt, encrypted,
empty, unsupported) is reported with its error and the others are still ingested. With `contextual=True` every
chunk gets a 1-2 sentence context from the LM (`Contextualize`), looked up first in `contexts.json`, so
re-ingesting costs no LM calls; the indexed text of a chunk is then `context + "\\n\\n" + text`, for BM25 and
for the embedder alike. A passage's title is `"<document>, page <n>"`.

Indexing: a changed corpus gets a new chromadb collection (its name hashes the corpus), but vectors whose text
is unchanged are copied from the previous collection instead of being embedded again, so re-ingesting one
changed file embeds only that file's chunks. BM25 is rebuilt (it costs no model call). Earlier indexes are then
deleted.

Asking (`ask`): any method of `PROGRAMS` over the collection's hybrid retriever (optionally reranked by the LM
grader), printing the answer and the sources (document, page, kind) of the passages the method used.
"""

from __future__ import annotations

import argparse
import contextvars
import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragscale.experiments.config import ADAPTERS, ConfigError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
CONTEXTS = "contexts.json"
MANIFEST_VERSION = 2
CHECKPOINT_EVERY = 16
"""New contexts written to `contexts.json` while a document is contextualised, so an interruption keeps them."""


def context_key(model: str, document: str, chunk: str) -> str:
    """Cache key of a chunk's context: SHA-256 over the model name, the document text and the chunk text."""
    digest = hashlib.sha256()
    for part in (model, document, chunk):
        digest.update(part.encode("utf-8") + b"\0")
    return digest.hexdigest()


def _write_json(path: Path, value: Any) -> None:
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(path)


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


def _vector_digest(title: str, text: str) -> str:
    """Digest of the text a dense index embeds for a passage (`DenseRetriever` embeds "title: text")."""
    return hashlib.sha256(f"{title}: {text}".encode()).hexdigest()[:16]


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
        if self.manifest.get("version", 1) < MANIFEST_VERSION:
            self._rekey_by_path()

    def _rekey_by_path(self) -> None:
        """Version 1 keyed documents by file name: key them by the resolved path it recorded (chunk ids kept)."""
        documents = {}
        for name, entry in self.manifest.get("documents", {}).items():
            source = entry.get("path") or name
            documents[source] = {"name": name, **{k: v for k, v in entry.items() if k != "path"}}
            for chunk in self.chunks:
                if chunk["document"] == name:
                    chunk.setdefault("source", source)
        self.manifest = {**self.manifest, "version": MANIFEST_VERSION, "documents": documents}

    @property
    def exists(self) -> bool:
        return (self.root / MANIFEST).is_file()

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        partial = (self.root / CHUNKS).with_suffix(f".{os.getpid()}.tmp")
        with partial.open("w", encoding="utf-8") as handle:
            for chunk in self.chunks:
                handle.write(json.dumps(chunk, ensure_ascii=False) + "\n")
        partial.replace(self.root / CHUNKS)
        self.save_contexts()
        _write_json(self.root / MANIFEST, self.manifest)

    def save_contexts(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _write_json(self.root / CONTEXTS, self.contexts)

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
        from ragscale.programs.retrieval import RETRIEVERS, BM25Retriever, DenseRetriever, HybridRetriever

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
            self.save()  # the chunks too: a collection re-keyed from version 1 must not keep its old chunk lines
            self.drop_stale_indexes(dense.collection_name, getattr(bm25, "path", None))
        return dense if kind == "dense" else HybridRetriever(dense, bm25)

    def _copy_unchanged_vectors(self, dense: Any) -> int:
        """Copy into `dense` the vectors of the manifest's index whose passage text is unchanged; how many."""
        record = self.manifest.get("index") or {}
        previous = record.get("dense")
        if not previous or previous == dense.collection_name or record.get("embedder") != dense.embedder.name:
            return 0
        names = {getattr(c, "name", c) for c in dense.client.list_collections()}
        if previous not in names:
            return 0
        digests = record.get("vectors", {})
        missing = set(dense.missing_ids())
        wanted = [
            p.id for p in dense.passages if p.id in missing and digests.get(p.id) == _vector_digest(p.title, p.text)
        ]
        source = dense.client.get_collection(previous)
        copied = 0
        for start in range(0, len(wanted), 1000):
            got = source.get(ids=wanted[start : start + 1000], include=["embeddings", "metadatas"])
            if got["ids"]:
                dense.collection.add(ids=got["ids"], embeddings=got["embeddings"], metadatas=got["metadatas"])
                copied += len(got["ids"])
        if copied:
            log.info("reused %d vectors of %s", copied, previous)
        return copied

    def drop_stale_indexes(self, keep: str | None, keep_bm25: Path | None = None) -> None:
        """Delete chromadb collections other than `keep` and, when `keep_bm25` is given, the other BM25 files."""
        index = self.root / "index"
        if (index / "chroma").is_dir():
            from ragscale.programs.retrieval.dense import chroma_client

            client = chroma_client(index)
            for stale in client.list_collections():
                name = getattr(stale, "name", stale)
                if name != keep:
                    client.delete_collection(name)
        bm25 = index / "bm25"
        if bm25.is_dir() and keep_bm25 is not None:
            for path in bm25.glob("*.json"):
                if path.resolve() != Path(keep_bm25).resolve():
                    path.unlink()


def contextualize_chunks(
    chunks: Sequence[Mapping],
    *,
    model: str,
    cache: dict[str, str],
    max_document_chars: int = 6000,
    threads: int = 4,
    report: IngestReport | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> list[str]:
    """A context for each chunk of ONE document (its chunks, in order), from `cache` or from the LM configured in
    `dspy.settings`; new contexts are added to `cache`, and `checkpoint()` is called every `CHECKPOINT_EVERY` of
    them (to save the cache). Runs `threads` LM calls at a time. A reply that cannot be parsed gives an empty
    context (cached too: decoding is greedy, so asking again gives the same reply)."""
    from ragscale.programs.contextualize import Contextualize

    document = "\n\n".join(c["text"] for c in chunks)
    keys = [context_key(model, document, c["text"]) for c in chunks]
    todo = [i for i, key in enumerate(keys) if key not in cache]
    program = Contextualize(max_document_chars=max_document_chars)

    def one(i: int) -> str:
        from dspy.utils.exceptions import AdapterParseError

        try:
            return program(document=document, chunk=chunks[i]["text"]).context
        except AdapterParseError as error:  # a small model may reply with nothing usable: index the chunk as is
            log.warning("no context for chunk %s of %s: %s", chunks[i].get("id", i), chunks[i].get("document"), error)
            return ""

    if todo:
        with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="ragscale-context") as pool:
            futures = {i: pool.submit(contextvars.copy_context().run, one, i) for i in todo}
            for done, (i, future) in enumerate(futures.items(), start=1):
                cache[keys[i]] = future.result()
                if checkpoint is not None and done % CHECKPOINT_EVERY == 0:
                    checkpoint()
    if report is not None:
        report.contexts_written += len(todo)
        report.contexts_cached += len(chunks) - len(todo)
    return [cache[key] for key in keys]


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
    from ragscale.data.documents import (
        DEFAULT_MAX_TOKENS,
        SUFFIXES,
        DocumentError,
        document_source,
        file_sha256,
        folder_documents,
        load_document,
    )

    store = Collection(collection, runs_dir)
    report = IngestReport()
    options = {
        "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
        "contextual": contextual,
        "model": model if contextual else "",
        "pictures": getattr(describer, "method", None) or ("ocr" if ocr else "caption"),
    }
    documents = store.manifest.setdefault("documents", {})
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
    for path in files:
        source = document_source(path)
        try:
            digest = file_sha256(path) if path.is_file() else ""
            previous = documents.get(source)
            if previous and previous["sha256"] == digest and previous["options"] == options:
                report.unchanged.append(str(path))
                continue
            kwargs = {"max_tokens": options["max_tokens"], "describer": describer, "ocr": ocr}
            if count_tokens is not None:
                kwargs["count_tokens"] = count_tokens
            chunks = [c.to_dict() for c in load_document(path, **kwargs)]
        except DocumentError as error:
            report.failed[str(path)] = str(error)
            log.error("%s", error)
            continue
        contexts = (
            contextualize_chunks(
                chunks,
                model=model,
                cache=store.contexts,
                max_document_chars=max_document_chars,
                threads=threads,
                report=report,
                checkpoint=store.save_contexts,
            )
            if contextual
            else [""] * len(chunks)
        )
        for chunk, context in zip(chunks, contexts, strict=True):
            chunk["context"] = context
        (report.replaced if previous else report.added).append(str(path))
        store.chunks = [c for c in store.chunks if c.get("source") != source] + chunks
        documents[source] = {
            "name": path.name,
            "sha256": digest,
            "options": options,
            "chunks": [c["id"] for c in chunks],
        }
        store.save()  # durable per document: an interrupted ingestion keeps what finished
        log.info("%s: %d chunks%s", path, len(chunks), " (contextual)" if contextual else "")
    report.chunks = len(store.chunks)
    if report.changed or not store.exists:
        store.save()
    if build_index and store.chunks and not store.index_is_current():
        store.retriever()  # embeds what the index lacks (after a change, only the changed files' chunks)
        report.embedded, report.reused = store.embedded, store.reused
    return report


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


def build_program(method: str, retriever: Any, k: int) -> Any:
    """`PROGRAMS[method](retriever=..., k=...)`; an unknown method fails with the valid ones."""
    from ragscale.programs import PROGRAMS

    if method not in PROGRAMS:
        raise ConfigError(f"unknown method {method!r}; valid choices: {', '.join(sorted(PROGRAMS))}")
    return PROGRAMS[method](retriever=retriever, k=k)


def ask(
    question: str,
    *,
    collection: str,
    runs_dir: Path = Path("runs"),
    method: str = "rag",
    k: int = 5,
    rerank_depth: int = 0,
    retriever_kind: str = "hybrid",
) -> dict[str, Any]:
    """Answer `question` over `collection` with `method`, using the LM configured in `dspy.settings`.

    Returns {"answer", "sources": [{"document", "page", "kind", "id"}, ...]}. `rerank_depth` > 0 puts the LM
    grader (`Reranker`) over that many hybrid candidates.
    """
    store = Collection(collection, runs_dir)
    if not store.exists:
        raise ConfigError(f"no collection {collection!r} under {store.root.parent}: run `ragscale ingest` first")
    retriever = store.retriever(retriever_kind)
    if rerank_depth > 0:
        from ragscale.programs.retrieval.rerank import Reranker

        retriever = Reranker(retriever, depth=rerank_depth)
    program = build_program(method, retriever, k)
    prediction = program(question=question)
    return {"answer": str(prediction.answer), "sources": sources(getattr(prediction, "passages", []), store.by_id())}


# ---------------------------------------------------------------------------------------------------------------
# command line


def _load_lm(name: str, api_base: str | None, max_tokens: int = 256) -> Any:
    from ragscale.experiments.runner import load_named_lm

    return load_named_lm(name, api_base=api_base, max_tokens=max_tokens)


def _add_ingest(subparsers) -> None:
    ingest_cmd = subparsers.add_parser(
        "ingest",
        help="chunk PDF/.txt/.md/.html files (text, tables as markdown, pictures as text) into a collection",
        description="Unchanged files are skipped; changed ones are replaced; unreadable ones are reported and "
        "the others still ingested (exit code 1 if any failed).",
    )
    ingest_cmd.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="files, or folders (their supported files, recursively)"
    )
    ingest_cmd.add_argument("--collection", required=True, help="collection name (runs/collections/NAME)")
    ingest_cmd.add_argument("--contextual", action="store_true", help="prepend an LM-written context to each chunk")
    ingest_cmd.add_argument("--lm", default="smollm2-135m", help="LM for --contextual (default: smollm2-135m)")
    ingest_cmd.add_argument("--api-base", dest="api_base", help="URL of an OpenAI-compatible server for --lm")
    ingest_cmd.add_argument("--adapter", choices=ADAPTERS, default="field", help="prompt format (default: field)")
    ingest_cmd.add_argument(
        "--max-tokens", dest="max_tokens", type=int, default=None, help="words per chunk (default: 150)"
    )
    ingest_cmd.add_argument(
        "--document-chars",
        dest="document_chars",
        type=int,
        default=6000,
        help="characters of the document the LM sees around each chunk (default: 6000)",
    )
    ingest_cmd.add_argument("--threads", type=int, default=4, help="context LM calls in flight (default: 4)")
    ingest_cmd.add_argument("--vlm-url", dest="vlm_url", help="OpenAI-compatible server of a vision-language model")
    ingest_cmd.add_argument("--vlm-model", dest="vlm_model", help="the VLM's model name on that server")
    ingest_cmd.add_argument("--no-ocr", dest="ocr", action="store_false", help="no OCR of pictures (caption only)")
    ingest_cmd.add_argument("--runs-dir", dest="runs_dir", type=Path, default=Path("runs"))
    ingest_cmd.set_defaults(func=_cmd_ingest)


def _cmd_ingest(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import dspy

    from ragscale.data.documents import VLMDescriber
    from ragscale.experiments.runner import make_adapter

    if bool(args.vlm_url) != bool(args.vlm_model):
        raise ConfigError("--vlm-url and --vlm-model go together")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be >= 1 word, got {args.max_tokens}")
    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    describer = VLMDescriber(args.vlm_url, args.vlm_model) if args.vlm_url else None
    common = {
        "collection": args.collection,
        "runs_dir": args.runs_dir,
        "max_tokens": args.max_tokens,
        "describer": describer,
        "ocr": args.ocr,
        "max_document_chars": args.document_chars,
        "threads": args.threads,
    }
    if args.contextual:
        lm = _load_lm(args.lm, args.api_base)
        with dspy.context(lm=lm, adapter=make_adapter(args.adapter)):
            report = ingest(args.paths, contextual=True, model=args.lm, **common)
    else:
        report = ingest(args.paths, **common)
    for kind in ("added", "replaced", "unchanged"):
        for path in getattr(report, kind):
            print(f"{kind}: {path}")
    for error in report.failed.values():
        print(f"failed: {error}", file=sys.stderr)
    contexts = (
        f"; contexts: {report.contexts_written} written, {report.contexts_cached} cached" if args.contextual else ""
    )
    vectors = f"; vectors: {report.embedded} embedded, {report.reused} reused" if report.changed else ""
    print(f"collection {args.collection}: {report.chunks} chunks{contexts}{vectors}")
    return 1 if report.failed else 0


def _add_ask(subparsers) -> None:
    from ragscale.programs import PROGRAMS

    ask_cmd = subparsers.add_parser("ask", help="answer a question over an ingested collection, with its sources")
    ask_cmd.add_argument("question")
    ask_cmd.add_argument("--collection", required=True)
    ask_cmd.add_argument("--method", choices=sorted(PROGRAMS), default="rag", help="RAG method (default: rag)")
    ask_cmd.add_argument("--lm", default="smollm2-135m", help="a preset, model dir, .gguf, or openai/<model>")
    ask_cmd.add_argument("--api-base", dest="api_base", help="URL of an OpenAI-compatible server for --lm")
    ask_cmd.add_argument("--adapter", choices=ADAPTERS, default="field", help="prompt format (default: field)")
    ask_cmd.add_argument("--k", type=int, default=5, help="passages per retrieval (default: 5)")
    ask_cmd.add_argument(
        "--rerank", type=int, default=0, metavar="DEPTH", help="grade DEPTH hybrid candidates with the LM first"
    )
    ask_cmd.add_argument("--runs-dir", dest="runs_dir", type=Path, default=Path("runs"))
    ask_cmd.add_argument("--json", dest="json_path", type=Path, help="also write the answer and sources as JSON")
    ask_cmd.set_defaults(func=_cmd_ask)


def _cmd_ask(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import dspy

    from ragscale.experiments.runner import make_adapter

    if not Collection(args.collection, args.runs_dir).exists:
        raise ConfigError(f"no collection {args.collection!r} under {args.runs_dir / 'collections'}")
    if args.k < 1 or args.rerank < 0:
        raise ConfigError(f"--k must be >= 1 and --rerank >= 0, got --k {args.k} --rerank {args.rerank}")
    if not args.question.strip():
        raise ConfigError("the question is empty")
    lm = _load_lm(args.lm, args.api_base)
    with dspy.context(lm=lm, adapter=make_adapter(args.adapter)):
        result = ask(
            args.question,
            collection=args.collection,
            runs_dir=args.runs_dir,
            method=args.method,
            k=args.k,
            rerank_depth=args.rerank,
        )
    print(f"answer: {result['answer']}")
    print("sources:")
    names = {}
    for chunk in Collection(args.collection, args.runs_dir).chunks:
        names.setdefault(chunk["document"], set()).add(chunk.get("source", ""))
    if not result["sources"]:
        print(f"  (none: {args.method} answered without passages)")
    for number, source in enumerate(result["sources"], start=1):
        where = f" ({source['source']})" if len(names.get(source["document"], ())) > 1 else ""
        print(f"  [{number}] {source['document']}{where}, page {source['page']}, {source['kind']}")
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0
