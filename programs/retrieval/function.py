"""A user's own search function as a retriever: ``search(query, k)`` returning texts or ``{title, text}`` dicts.

ragscale's retrievers return ``Passage`` objects (``passage.py``); a DSPy user's retriever is often a plain
function over their own store that returns strings, or dicts with a text and a title. ``FunctionRetriever`` turns
each item into a ``Passage``: a string is the text with no title; a dict gives ``text`` (or ``contents``, FlashRAG's
field), ``title`` and ``id`` when it has them. A passage without an id gets the id a corpus would give the same title
and text (``ragscale.data.corpus.passage_id``), so the same passage found by two queries is merged once. Every method
accepts such a function as its retriever (``Method.retriever`` wraps it); an item of another type raises a
``TypeError`` naming it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ragscale.programs.retrieval.passage import Passage


def text_id(title: str, text: str) -> str:
    """The id a corpus gives a passage with this title and text (``data.corpus.passage_id``'s rule)."""
    return hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()[:16]


def as_passage(item: Any) -> Passage:
    """A search result as a ``Passage``: a ``Passage`` as it is, a string as its text, a dict by its fields."""
    if isinstance(item, Passage):
        return item
    if isinstance(item, str):
        return Passage(id=text_id("", item), title="", text=item)
    if isinstance(item, Mapping):
        text = item.get("text", item.get("contents"))
        if not isinstance(text, str):
            raise TypeError(f"a search result dict needs a string 'text' (or 'contents'), got keys {sorted(item)}")
        title = str(item.get("title") or "")
        pid, score = item.get("id"), item.get("score") or 0.0
        if not isinstance(score, int | float):
            raise TypeError(f"a search result's 'score' must be a number, got {score!r}")
        return Passage(id=str(pid) if pid is not None else text_id(title, text), title=title, text=text,
                       score=float(score))  # fmt: skip
    raise TypeError(f"a search result must be a str, a dict with 'text' or a Passage, got {type(item).__name__}")


class FunctionRetriever:
    """``search(query, k)`` whose results become ``Passage`` objects; shared, not copied, with a program."""

    def __init__(self, search: Callable[[str, int], Any]) -> None:
        if not callable(search):
            raise TypeError(f"a retriever must be callable as search(query, k), got {type(search).__name__}")
        self.search = search

    def __call__(self, query: str, k: int) -> list[Passage]:
        return [as_passage(item) for item in list(self.search(query, k))[:k]]

    def __deepcopy__(self, memo: dict) -> FunctionRetriever:
        return self

    def __repr__(self) -> str:
        return f"FunctionRetriever({getattr(self.search, '__qualname__', self.search)!r})"


def is_plain_function(value: Any) -> bool:
    """A function, a bound method or a ``functools.partial``: a user's search function rather than a retriever
    object, which returns ``Passage`` objects itself."""
    return inspect.isfunction(value) or inspect.ismethod(value) or isinstance(value, functools.partial)


def as_retriever(value: Any) -> Any:
    """``value`` wrapped in a ``FunctionRetriever`` when it is a plain function; any other value as it is."""
    return FunctionRetriever(value) if is_plain_function(value) else value
