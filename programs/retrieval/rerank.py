"""Reranking: an LM relevance grader over a deeper first-stage ranking, then a token-budget cut.

No cross-encoder ships its weights in a PyPI package (STACK-NOTES; ``flashrank`` 0.2.10 downloads its model
at run time), so the reranker is the LM itself: ``Predict(Grade)`` judges each of the first ``depth``
candidates (relevant / ambiguous / irrelevant, as in CRAG and Self-RAG), and the candidates are reordered:

- ``order="fused"`` (the default): the grade order fused with the first-stage order by reciprocal rank fusion
  (``rrf``, constant 60, equal weights; ``score`` is the fused score). A candidate the grader rejects moves down and
  one it prefers moves up, but a first-stage order that was already right is not thrown away on a weak grader's
  word. Combining first-stage and reranker evidence is the usual remedy when the reranker alone is weaker than the
  retriever (Wang, Zhuang and Zuccon, ICTIR 2021).
- ``order="grade"``: by grade alone, ties kept in first-stage order; ``score`` is the grade's (``GRADE_SCORE``:
  1 relevant, 0.5 ambiguous, 0 irrelevant), in expectation when the LM scores the options.

With ``depth`` > ``k`` a passage the grader prefers can climb from below the cut. The grader is a DSPy
predictor, so a program holding a ``Reranker`` as its retriever compiles it too (``program.retriever.grade``).
After reranking, ``k`` passages are kept and, when ``budget`` is set, cut to the passages that fit in ``budget``
tokens (``trim_to_budget``).

With the local engine a grade is a constrained choice (the adapter sends the options as a JSON-schema enum
and the engine answers with the most likely one), so it always parses, and the engine returns every option's
log-likelihood: a candidate's score is then its expected grade score under the options' probabilities
(P(relevant) + 0.5 P(ambiguous)), calibrated when the grader is (``CalibratedPredict``), so candidates of one
label are ordered too. An LM that returns no option scores gives the label's score. With an LM that cannot
constrain its reply, a grade that cannot be parsed scores as "ambiguous" (logged, and counted as "unparsed" in
``grade_counts``), so one bad reply does not lose the question.

A ``Reranker`` is itself a retriever (``reranker(query, k) -> list[Passage]``, most relevant first). Grades are
requested in ``threads`` threads so a batching local engine can answer them together.
"""

from __future__ import annotations

import contextvars
import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import dspy
from dspy.utils.exceptions import AdapterParseError

from ragscale.programs.calibration import CalibratedPredict
from ragscale.programs.retrieval.hybrid import rrf
from ragscale.programs.retrieval.passage import Passage, Retriever, format_passage, trim_to_budget
from ragscale.signatures import Grade

logger = logging.getLogger(__name__)

GRADE_SCORE = {"relevant": 1.0, "ambiguous": 0.5, "irrelevant": 0.0}
ORDERS = ("grade", "fused")


class Reranker(dspy.Module):
    """retrieve(query, max(k, depth)) -> grade each -> fuse the grade order with the first-stage order (or order by
    grade alone) -> top k -> cut to ``budget`` tokens."""

    def __init__(
        self,
        retriever: Retriever,
        *,
        depth: int = 10,
        budget: int | None = None,
        count_tokens: Callable[[str], int] | None = None,
        threads: int = 4,
        order: str = "fused",
    ):
        super().__init__()
        if order not in ORDERS:
            raise ValueError(f"unknown reranker order {order!r}; valid: {', '.join(ORDERS)}")
        if budget is not None and count_tokens is None:
            raise ValueError("a token budget needs count_tokens (e.g. functools.partial(count_tokens, lm))")
        self.retriever, self.depth, self.budget, self.threads = retriever, depth, budget, threads
        self.count_tokens, self.order = count_tokens, order
        self.grade = CalibratedPredict(Grade)
        self.grade_counts: Counter[str] = Counter()  # every grade given so far, "unparsed" for a failed parse

    def _grade(self, query: str, passage: Passage) -> tuple[str, float]:
        """The passage's grade and score: the expected ``GRADE_SCORE`` under the options' probabilities when the
        LM gives them, else the grade's own score."""
        try:
            prediction = self.grade(question=query, document=format_passage(passage), config={"logprobs": True})
        except AdapterParseError as error:
            logger.warning("could not grade passage %s: %s", passage.id, error)
            return "unparsed", GRADE_SCORE["ambiguous"]
        grade = str(prediction.grade)
        probabilities = self.grade.probabilities(prediction)
        if probabilities is None:
            return grade, GRADE_SCORE.get(grade, GRADE_SCORE["ambiguous"])
        return grade, sum(GRADE_SCORE.get(o, 0.0) * p for o, p in probabilities.items())

    def forward(self, query: str, k: int) -> list[Passage]:
        if k <= 0:
            return []
        candidates = self.retriever(query, max(k, self.depth))
        if self.threads > 1 and len(candidates) > 1:
            with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="ragscale-rerank") as pool:
                futures = [pool.submit(contextvars.copy_context().run, self._grade, query, p) for p in candidates]
                graded = [future.result() for future in futures]
        else:
            graded = [self._grade(query, p) for p in candidates]
        self.grade_counts.update(grade for grade, _ in graded)
        scores = [score for _, score in graded]
        by_grade = [
            replace(candidates[i], score=scores[i])
            for i in sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
        ]
        ranked = (by_grade if self.order == "grade" else rrf([by_grade, candidates]))[:k]
        if self.budget is not None:
            ranked = trim_to_budget(ranked, self.budget, self.count_tokens)
        return ranked

    def __repr__(self) -> str:
        return f"Reranker({self.retriever!r}, depth={self.depth}, budget={self.budget}, order={self.order!r})"
