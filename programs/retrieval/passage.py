"""The passage type every retriever returns, the retriever protocol, and post-processing of ranked lists.

A retriever is anything callable as ``retriever(query, k) -> list[Passage]`` with the most relevant passage
FIRST. Post-processing helpers keep that convention on input; ``most_relevant_last`` is the one place that
reverses it (the DRAG paper places the most relevant passage last, closest to the question).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tqdm import tqdm


@dataclass(frozen=True)
class Passage:
    """One retrieved passage; ``score`` is the retriever's own score (cosine, BM25 or fused RRF)."""

    id: str
    title: str
    text: str
    score: float = 0.0


@runtime_checkable
class Retriever(Protocol):
    """``retriever(query, k)`` returns at most ``k`` passages, most relevant first."""

    def __call__(self, query: str, k: int) -> list[Passage]: ...


def format_passage(passage: Passage) -> str:
    """The text a program puts in its ``documents`` field for one passage."""
    return f"{passage.title}: {passage.text}"


def most_relevant_last(passages: Sequence[Passage]) -> list[Passage]:
    """Reverse a most-relevant-first list so the best passage sits last, next to the question in the prompt."""
    return list(reversed(passages))


def references(passages: Sequence[Passage]) -> list[dict[str, str]]:
    """What a prediction reports of the passages it used: their ids and titles."""
    return [{"id": p.id, "title": p.title} for p in passages]


def merge_by_rank(rankings: Sequence[Sequence[Passage]]) -> list[Passage]:
    """The passages of several most-relevant-first lists, without repeats, most relevant first: ordered by the
    best rank each reached in any list, ties in retrieval order."""
    best: dict[str, tuple[int, int, Passage]] = {}
    for order, ranking in enumerate(rankings):
        for rank, passage in enumerate(ranking):
            if passage.id not in best or rank < best[passage.id][0]:
                best[passage.id] = (rank, order, passage)
    return [passage for _, _, passage in sorted(best.values(), key=lambda entry: entry[:2])]


def trim_to_budget(passages: Sequence[Passage], budget: int, count_tokens: Callable[[str], int]) -> list[Passage]:
    """Keep passages in the given order while their formatted texts fit in ``budget`` tokens.

    ``count_tokens(text) -> int`` is the LM's tokenizer (for example
    ``functools.partial(ragscale.programs.lm.count_tokens, lm)``). Trimming stops at the first passage that
    does not fit, so with a most-relevant-first list the least relevant ones are dropped; trim before calling
    ``most_relevant_last``.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0 tokens, got {budget}")
    kept: list[Passage] = []
    used = 0
    for passage in passages:
        cost = count_tokens(format_passage(passage))
        if used + cost > budget:
            break
        kept.append(passage)
        used += cost
    return kept


def corpus_passages(corpus: Sequence[Mapping]) -> list[Passage]:
    """Turn corpus entries ``{"id", "title", "text"}`` into passages, first entry winning on a repeated id.

    Raises ``ValueError`` naming the entry index and the field when an entry lacks a string id, title or text.
    """
    seen: dict[str, Passage] = {}
    for index, entry in enumerate(corpus):
        for field in ("id", "title", "text"):
            value = entry.get(field) if isinstance(entry, Mapping) else None
            if not isinstance(value, str):
                raise ValueError(
                    f"corpus entry {index}: field {field!r} must be a string, got {type(value).__name__} "
                    f"(entries are dicts with 'id', 'title' and 'text')"
                )
        if entry["id"] not in seen:
            seen[entry["id"]] = Passage(id=entry["id"], title=entry["title"], text=entry["text"])
    return list(seen.values())


def corpus_key(passages: Sequence[Passage], *parts: str) -> str:
    """A short hash naming a corpus given without its digest: the passages (id, title and text, in id order)
    plus extra ``parts``. A changed corpus, or a changed part, gives a new key."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8") + b"\0")
    for passage in sorted(passages, key=lambda p: p.id):
        for field in (passage.id, passage.title, passage.text):
            digest.update(field.encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


def index_key(corpus: str, *parts: str) -> str:
    """The name of one index over a corpus: the corpus's key followed by a short hash of what else decides the
    index (the retriever, the tokenizer or the embedder), so every index of a corpus starts with its key."""
    return f"{corpus}-{hashlib.sha256(chr(0).join(parts).encode('utf-8')).hexdigest()[:8]}"


def progress_bar(total: int, desc: str, show: bool = True):
    """A tqdm bar counting passages, with passages/s and the ETA; None when not ``show``n."""
    if not show:
        return None

    return tqdm(total=total, desc=desc, unit="passage", unit_scale=True, dynamic_ncols=True)
