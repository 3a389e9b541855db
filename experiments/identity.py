"""What identifies a run's result: a hash of the settings that determine it and of the questions it answers.

Two runs with the same key compute the same thing, so a run that was killed or failed is found again by its key
(``ragscale run`` resumes it) and a sweep skips a configuration whose key already finished. Settings that change
only how fast a result comes (threads, the cache, the run's name, where the store lives) are not part of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from ragscale.experiments.config import RunConfig

KEY_FIELDS = (
    "method", "dataset", "optimizer", "lm", "teacher", "api_base", "teacher_api_base", "weights", "adapter",
    "max_tokens", "retriever", "k", "max_iterations", "max_demos", "max_docs_per_demo", "metric", "limit",
    "train_limit", "seed",
)  # fmt: skip


def data_fingerprint(train: Sequence, evalset: Sequence) -> str:
    """A hash of the train and eval questions in order: their ids, texts and gold answers."""
    digest = hashlib.sha256()
    for split, examples in (("train", train), ("eval", evalset)):
        for ex in examples:
            digest.update(json.dumps([split, str(ex.id), ex.question, list(ex.answers)], ensure_ascii=False).encode())
    return digest.hexdigest()[:16]


def config_key(config: RunConfig, fingerprint: str) -> str:
    """A hash of what determines a configuration's result: its settings (``KEY_FIELDS``) and the data."""
    values = {name: getattr(config, name) for name in KEY_FIELDS}
    text = json.dumps({**values, "data": fingerprint}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]
