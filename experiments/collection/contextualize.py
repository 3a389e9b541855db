"""Contextual retrieval's chunk contexts: 1-2 sentences from the LM that situate a chunk in its document.

Each context is cached by ``context_key`` (SHA-256 over the model name, the document text and the chunk text), so
re-ingesting costs no LM calls; ``contextualize_chunks`` writes the missing ones with ``threads`` LM calls at a
time and checkpoints the cache every ``CHECKPOINT_EVERY`` new contexts, so an interruption keeps them.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from dspy.utils.exceptions import AdapterParseError

from ragscale.programs.contextualize import Contextualize

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 16
"""New contexts written to ``contexts.json`` while a document is contextualised, so an interruption keeps them."""


def context_key(model: str, document: str, chunk: str) -> str:
    """Cache key of a chunk's context: SHA-256 over the model name, the document text and the chunk text."""
    digest = hashlib.sha256()
    for part in (model, document, chunk):
        digest.update(part.encode("utf-8") + b"\0")
    return digest.hexdigest()


def contextualize_chunks(
    chunks: Sequence[Mapping],
    *,
    model: str,
    cache: dict[str, str],
    max_document_chars: int = 6000,
    threads: int = 4,
    checkpoint: Callable[[], None] | None = None,
) -> list[str]:
    """A context for each chunk of ONE document (its chunks, in order), from `cache` or from the LM configured in
    `dspy.settings`; new contexts are added to `cache`, and `checkpoint()` is called every `CHECKPOINT_EVERY` of
    them (to save the cache). Runs `threads` LM calls at a time. A reply that cannot be parsed gives an empty
    context (cached too: decoding is greedy, so asking again gives the same reply)."""
    document = "\n\n".join(c["text"] for c in chunks)
    keys = [context_key(model, document, c["text"]) for c in chunks]
    todo = [i for i, key in enumerate(keys) if key not in cache]
    program = Contextualize(max_document_chars=max_document_chars)

    def one(i: int) -> str:
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
    return [cache[key] for key in keys]
