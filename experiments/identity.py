"""What identifies a run's result: a hash of the settings that determine it and of the questions it answers.

Two runs with the same key compute the same thing, so a run that was killed or failed is found again by its key
(``ragscale run`` resumes it) and a sweep skips a configuration whose key already finished. Settings that change
only how fast a result comes (threads, the cache, the run's name, where the store lives) are not part of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ragscale.experiments.config import RunConfig

KEY_FIELDS = (
    "method", "dataset", "optimizer", "lm", "teacher", "api_base", "teacher_api_base", "weights", "adapter",
    "max_tokens", "retriever", "docs", "iterations", "shots", "docs_per_demo", "metric", "limit",
    "train_limit", "seed",
)  # fmt: skip


OPTIONAL_KEY_FIELDS = ("reflection_lm", "budget")
"""Settings that are part of the key only when set (GEPA's), so that the keys of other runs stay what they were."""


def data_fingerprint(train: Sequence, evalset: Sequence) -> str:
    """A hash of the train and eval questions in order: their ids, texts, gold answers and paragraphs (the corpus
    the run retrieves from is built from them)."""
    digest = hashlib.sha256()
    for split, examples in (("train", train), ("eval", evalset)):
        for ex in examples:
            paragraphs = [[p.get("title"), p.get("text")] for p in (ex.get("paragraphs") or [])]
            digest.update(
                json.dumps([split, str(ex.id), ex.question, list(ex.answers), paragraphs], ensure_ascii=False).encode()
            )
    return digest.hexdigest()[:16]


def config_key(
    config: RunConfig, fingerprint: str, program: Any = None, retriever: Any = None, corpus: Any = None
) -> str:
    """A hash of what determines a configuration's result: its settings (``KEY_FIELDS``) and the data, the
    state of a ``program`` compiled elsewhere and given to the run (the sweep compiles once per method and shots;
    its demonstrations then decide the result, not the run's own compilation), the ``identity`` of a
    retriever given to the run when it names one (the oracle rows: gold paragraphs or all of them), and the
    sha256 of the corpus searched (``corpus``, a ``CorpusIdentity``), so a run never resumes one on another
    corpus."""
    values = {name: getattr(config, name) for name in KEY_FIELDS}
    values.update({name: getattr(config, name) for name in OPTIONAL_KEY_FIELDS if getattr(config, name) is not None})
    if program is not None:
        values["program"] = program.dump_state()
    if getattr(retriever, "identity", None):
        values["retriever_identity"] = retriever.identity
    if corpus is not None:
        values["corpus_sha256"] = corpus.sha256
    text = json.dumps({**values, "data": fingerprint}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]
