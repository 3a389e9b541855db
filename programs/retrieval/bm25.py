"""Sparse retrieval: Okapi BM25 (k1=1.5, b=0.75) over title + text, scored from a term-major sparse matrix.

The scores are rank-bm25's ``BM25Okapi``'s (a test checks them on a real corpus): ``idf = ln((N - n + 0.5) / (n +
0.5))``, a negative idf replaced by ``epsilon`` (0.25) times the mean idf, and ``idf * tf * (k1 + 1) / (tf + k1 *
(1 - b + b * len / avgdl))`` summed over the query's terms, a repeated query term counting again. rank-bm25 keeps
a dict of term counts per passage and scans every passage per query term, which at a million passages takes
gigabytes and seconds a query; here each term's postings (passage indices and their precomputed term weights,
float32) sit in flat numpy arrays, so a query touches only the passages holding its terms.

Tokenizer (``tokenize``): lower-case, split into maximal runs of Unicode letters and digits (so "Bates-Batcheller"
gives "bates", "batcheller" and "1868" stays a token), drop a small English stopword list (``STOPWORDS``).
No stemming. A passage is indexed as ``title + " " + text``, so a title match counts once more.

Persistence, without pickle: ``index_dir/bm25/<key>/`` holds the arrays (``postings.npz``, read with
``allow_pickle=False``) and the vocabulary (``terms.json``); ``key`` names the corpus (its digest when the caller
has one) and the tokenizer, so a changed corpus or tokenizer gets a new index. The folder is written under a
temporary name, its manifest (``manifest.py``: each file's size and checksum, the passage count) last, and renamed
when whole; a failed write removes it. On open the folder is checked against its manifest, and an index that is
not as recorded (a file truncated, altered or missing, no manifest) is rebuilt with a warning.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragscale.programs.retrieval import manifest
from ragscale.programs.retrieval.passage import Passage, corpus_key, corpus_passages, index_key, progress_bar

logger = logging.getLogger(__name__)

TOKENIZER_VERSION = "bm25-tok-v1"
FORMAT = "bm25-csc-v1"
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

    Args:
        corpus: entries ``{"id", "title", "text"}``; a repeated id keeps its first entry.
        index_dir: where the index is kept (``index_dir/bm25``) and found again; without it, in memory only.
        key: the corpus's digest (``data.corpora.Corpus.key``); without it the passages are hashed here.
        progress: draw a progress bar (passages/s, ETA) while tokenising.
    """

    k1 = 1.5
    b = 0.75
    epsilon = 0.25

    def __init__(
        self,
        corpus: Sequence[Mapping],
        *,
        index_dir: Path | None = None,
        key: str | None = None,
        progress: bool = False,
    ) -> None:
        self.passages = corpus_passages(corpus)
        if not self.passages:
            raise ValueError("cannot build a BM25 index over an empty corpus")
        base = key if key is not None else corpus_key(self.passages)
        self.key = index_key(base, "bm25", TOKENIZER_VERSION)
        self.path = Path(index_dir) / "bm25" / self.key if index_dir is not None else None
        arrays = self._load()
        if arrays is None:
            arrays = self._build(progress)
            self._save(arrays)
        self.terms: dict[str, int] = arrays["terms"]
        self.docs, self.weights, self.starts = arrays["docs"], arrays["weights"], arrays["starts"]

    def _build(self, progress: bool) -> dict[str, Any]:
        """Tokenise every passage once, then turn the passage-major counts into term-major postings."""
        terms: dict[str, int] = {}
        term_of, count_of = array("i"), array("i")
        lengths = np.empty(len(self.passages), dtype=np.float64)
        per_doc = np.empty(len(self.passages), dtype=np.int64)
        bar = progress_bar(len(self.passages), "BM25 index", progress)
        for index, passage in enumerate(self.passages):
            counts = Counter(tokenize(f"{passage.title} {passage.text}"))
            lengths[index] = sum(counts.values())
            per_doc[index] = len(counts)
            term_of.extend(terms.setdefault(term, len(terms)) for term in counts)
            count_of.extend(counts.values())
            if bar is not None and index % 1000 == 999:
                bar.update(1000)
        if bar is not None:
            bar.update(len(self.passages) % 1000)
            bar.close()
        term_ids = np.frombuffer(term_of, dtype=np.int32)
        order = np.argsort(term_ids, kind="stable")  # term-major, passages ascending within a term
        docs = np.repeat(np.arange(len(self.passages), dtype=np.int32), per_doc)[order]
        tf = np.frombuffer(count_of, dtype=np.int32)[order].astype(np.float64)
        df = np.bincount(term_ids, minlength=len(terms))
        starts = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(df, out=starts[1:])
        n = len(self.passages)
        idf = np.log(n - df + 0.5) - np.log(df + 0.5)
        mean_idf = float(idf.mean()) if len(idf) else 0.0
        idf[idf < 0] = self.epsilon * mean_idf  # BM25Okapi's floor for terms in more than half the passages
        avgdl = float(lengths.sum()) / n
        norm = self.k1 * (1 - self.b + self.b * lengths / avgdl) if avgdl > 0 else np.full(n, self.k1)
        weights = np.repeat(idf, df) * tf * (self.k1 + 1) / (tf + norm[docs])
        assert math.isfinite(float(weights.sum())), "BM25 weights must be finite"
        return {"terms": terms, "docs": docs, "weights": weights.astype(np.float32), "starts": starts}

    def scores(self, query: str) -> Any:
        """BM25Okapi scores of every passage for ``query`` (numpy float32 array in corpus order)."""
        scores = np.zeros(len(self.passages), dtype=np.float32)
        for term in tokenize(query):
            tid = self.terms.get(term)
            if tid is not None:
                lo, hi = self.starts[tid], self.starts[tid + 1]
                scores[self.docs[lo:hi]] += self.weights[lo:hi]
        return scores

    def _load(self) -> dict[str, Any] | None:
        """The stored index when its folder matches its manifest and the corpus; a broken one is rebuilt."""
        if self.path is None or not self.path.exists():
            return None
        try:
            manifest.check(self.path, format=FORMAT, passages=len(self.passages))
        except manifest.BrokenIndexError as error:
            logger.warning("BM25 index %s is broken: %s; rebuilding it", self.path, error)
            return None
        meta = json.loads((self.path / "terms.json").read_text(encoding="utf-8"))
        with np.load(self.path / "postings.npz", allow_pickle=False) as arrays:
            loaded = {name: arrays[name] for name in ("docs", "weights", "starts")}
        return {**loaded, "terms": {term: index for index, term in enumerate(meta["terms"])}}

    def _save(self, arrays: dict[str, Any]) -> None:
        """Write the index under a temporary name, its manifest last, and rename it whole; a failed write leaves
        nothing behind."""
        if self.path is None:
            return
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with manifest.cleaned_up(partial, self.path):
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            np.savez(partial / "postings.npz", docs=arrays["docs"], weights=arrays["weights"], starts=arrays["starts"])
            meta = {"format": FORMAT, "tokenizer": TOKENIZER_VERSION, "passages": len(self.passages),
                    "terms": list(arrays["terms"])}  # fmt: skip
            (partial / "terms.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
            manifest.write(partial, format=FORMAT, passages=len(self.passages), files=("postings.npz", "terms.json"))
            shutil.rmtree(self.path, ignore_errors=True)
            partial.replace(self.path)

    def __call__(self, query: str, k: int) -> list[Passage]:
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
