"""Sparse retrieval: rank-bm25's ``BM25Okapi`` (k1=1.5, b=0.75) over title + text.

Tokenizer (``tokenize``): lower-case, split into maximal runs of Unicode letters and digits (so "Bates-Batcheller"
gives "bates", "batcheller" and "1868" stays a token), drop a small English stopword list (``STOPWORDS``).
No stemming. A passage is indexed as ``title + " " + text``, so a title match counts once more.

Persistence, without pickle: the tokenised corpus is written as JSON (``index_dir/bm25/<hash>.json``, the hash
covering the corpus and ``TOKENIZER_VERSION``) and ``BM25Okapi`` is rebuilt from it on load, which skips
tokenisation (the benchmark reports that load time). Queries are scored over an inverted index built from
``BM25Okapi``'s statistics at load (same scores as ``BM25Okapi.get_scores``, without its scan of every passage
per query term).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragscale.programs.retrieval.passage import Passage, corpus_key, corpus_passages

logger = logging.getLogger(__name__)

TOKENIZER_VERSION = "bm25-tok-v1"
_TOKEN = re.compile(r"[^\W_]+")
STOPWORDS = frozenset(
    """a about after all also an and any are as at be been before but by can could did do does for from had has
    have he her his how i if in into is it its me my no not of on or our she so than that the their them then
    there these they this those to was we were what when where which who whom whose why will with would you your
    """.split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens of ``text`` without stopwords (see the module docstring)."""
    return [token for token in _TOKEN.findall(text.lower()) if token not in STOPWORDS]


class BM25Retriever:
    """``retriever(query, k)`` -> passages by BM25 score, highest first.

    With ``index_dir`` the tokenised corpus is cached there as JSON and reused by later runs; without it the
    index lives in memory only.
    """

    def __init__(self, corpus: Sequence[Mapping], *, index_dir: Path | None = None) -> None:
        from rank_bm25 import BM25Okapi

        self.passages = corpus_passages(corpus)
        if not self.passages:
            raise ValueError("cannot build a BM25 index over an empty corpus")
        self.key = corpus_key(self.passages, "bm25", TOKENIZER_VERSION)
        self.path = Path(index_dir) / "bm25" / f"{self.key}.json" if index_dir is not None else None
        tokens = self._load_tokens()
        if tokens is None:
            tokens = [tokenize(f"{p.title} {p.text}") for p in self.passages]
            self._save_tokens(tokens)
        self.bm25 = BM25Okapi(tokens)
        self._postings = self._invert()

    def _invert(self) -> dict:
        """term -> (passage indices, BM25 term weights without idf), from ``BM25Okapi``'s own statistics.

        ``BM25Okapi.get_scores`` walks every passage for every query term in Python; scoring over postings
        gives the same numbers (a test checks it) while touching only passages that contain the term.
        """
        import numpy as np

        bm25 = self.bm25
        lengths = np.asarray(bm25.doc_len, dtype=np.float64)
        norm = bm25.k1 * (1 - bm25.b + bm25.b * lengths / bm25.avgdl)
        docs: dict[str, list[int]] = {}
        freqs: dict[str, list[int]] = {}
        for index, counts in enumerate(bm25.doc_freqs):
            for term, count in counts.items():
                docs.setdefault(term, []).append(index)
                freqs.setdefault(term, []).append(count)
        postings = {}
        for term, indices in docs.items():
            where = np.asarray(indices, dtype=np.int64)
            tf = np.asarray(freqs[term], dtype=np.float64)
            postings[term] = (where, tf * (bm25.k1 + 1) / (tf + norm[where]))
        return postings

    def scores(self, query: str) -> Any:
        """BM25Okapi scores of every passage for ``query`` (numpy array in corpus order)."""
        import numpy as np

        scores = np.zeros(len(self.passages))
        for term in tokenize(query):
            if term in self._postings:
                where, weight = self._postings[term]
                scores[where] += self.bm25.idf[term] * weight
        return scores

    def _load_tokens(self) -> list[list[str]] | None:
        if self.path is None or not self.path.is_file():
            return None
        with self.path.open(encoding="utf-8") as handle:
            stored = json.load(handle)
        if stored.get("ids") != [p.id for p in self.passages] or stored.get("tokenizer") != TOKENIZER_VERSION:
            logger.warning("BM25 index %s does not match the corpus; rebuilding it", self.path)
            return None
        return stored["tokens"]

    def _save_tokens(self, tokens: list[list[str]]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(f".{os.getpid()}.tmp")
        payload = {"tokenizer": TOKENIZER_VERSION, "ids": [p.id for p in self.passages], "tokens": tokens}
        with partial.open("w", encoding="utf-8") as handle:
            json.dump(payload, handle, ensure_ascii=False, separators=(",", ":"))
        partial.replace(self.path)

    def __call__(self, query: str, k: int) -> list[Passage]:
        import numpy as np

        if k <= 0:
            return []
        scores = self.scores(query)
        k = min(k, len(self.passages))
        top = np.argpartition(-scores, k - 1)[:k]
        top = sorted(top.tolist(), key=lambda i: (-scores[i], i))
        return [
            Passage(id=p.id, title=p.title, text=p.text, score=float(scores[i]))
            for i in top
            if scores[i] > 0
            for p in (self.passages[i],)
        ]

    def __deepcopy__(self, memo: dict) -> BM25Retriever:
        return self

    def __repr__(self) -> str:
        return f"BM25Retriever(passages={len(self.passages)}, key={self.key})"
