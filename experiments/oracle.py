"""The oracle retriever: a question's own paragraphs, whatever the query asks, for the upper-bound rows of a table.

A methods table is read against what the reader does when retrieval is perfect (FlashRAG's "naive generation
with gold documents"): ``OracleRetriever(examples, gold_only=True)`` returns a question's supporting paragraphs,
``gold_only=False`` all of its paragraphs (the distractors too), in the data's order and whatever ``k`` asks. Any
other query (a sub-question, a rewritten query) finds nothing, so only a single-retrieval program such as RAG
gives a meaningful oracle row.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragscale.data import passage_id
from ragscale.programs.retrieval import Passage


class OracleRetriever:
    """``retriever(question, k)`` -> the question's gold (or all) paragraphs; anything else -> []."""

    def __init__(self, examples: Sequence, *, gold_only: bool):
        self.gold_only = gold_only
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
        return "oracle-gold" if self.gold_only else "oracle-all"

    def __call__(self, query: str, k: int) -> list[Passage]:
        return list(self.by_question.get(query, []))

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        return f"OracleRetriever({len(self.by_question)} questions, gold_only={self.gold_only})"
