"""The oracle retriever: a question's own paragraphs, whatever the query asks, for the upper-bound rows of a table.

A methods table is read against what the reader does when retrieval finds the gold paragraphs (FlashRAG's "naive
generation with gold documents"). ``OracleRetriever(examples, gold_only=True)`` returns a question's supporting
paragraphs and ``gold_only=False`` all of its paragraphs (the distractors too), in the data's order and whatever
``k`` asks. Given ``distractors`` (the run's own retriever over its corpus), it returns the gold paragraphs
followed by the highest-ranked passages that retriever finds that are not gold, ``k`` in all: the prompt RAG would
see at the same ``k`` had its retriever never missed, so the row against RAG's separates what retrieval misses
from what the reader makes of what it is given. Any other query (a sub-question, a rewritten query) finds
nothing, so only a single-retrieval program such as RAG gives a meaningful oracle row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ragscale.data import passage_id
from ragscale.programs.retrieval import Passage


class OracleRetriever:
    """``retriever(question, k)`` -> the question's gold (or all) paragraphs, padded to ``k`` with retrieved
    non-gold passages when given ``distractors``; anything else -> []."""

    def __init__(self, examples: Sequence, *, gold_only: bool, distractors: Callable | None = None):
        if distractors is not None and not gold_only:
            raise ValueError("distractors pad the gold paragraphs: give them with gold_only=True")
        self.gold_only, self.distractors = gold_only, distractors
        self.by_question = {
            example.question: [
                Passage(id=passage_id(p["title"], p["text"]), title=p["title"], text=p["text"])
                for p in example.paragraphs
                if p["is_supporting"] or not gold_only
            ]
            for example in examples
        }

    @property
    def identity(self) -> str:
        """What it returns, for the run's key: a run over the gold paragraphs never resumes one over all of them."""
        if self.distractors is not None:
            return "oracle-distractors"
        return "oracle-gold" if self.gold_only else "oracle-all"

    def __call__(self, query: str, k: int) -> list[Passage]:
        own = list(self.by_question.get(query, []))
        if self.distractors is None or not own:
            return own
        gold = {p.id for p in own}
        found = [p for p in self.distractors(query, k + len(own)) if p.id not in gold]
        return own + found[: max(0, k - len(own))]

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        return f"OracleRetriever({len(self.by_question)} questions, {self.identity})"
