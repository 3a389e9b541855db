"""Evaluating a program on a list of questions: each answered in its own token meter and scored, the scores and
the records returned together, and two evaluations compared pair by pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragscale.experiments.paired import paired_bootstrap

if TYPE_CHECKING:
    import dspy

    from ragscale.experiments.paired import BootstrapCI
    from ragscale.programs.base import Method


@dataclass(frozen=True)
class Evaluation:
    """How a program did on a list of questions: scores in percent, token usage, and one record per question
    (``records``: the question, prediction, gold answers, EM, F1, passages, calls and tokens, behaviour, error)."""

    em: float
    f1: float
    acc: float
    retrieval_recall: float | None
    n: int
    failed: int
    lm_calls: int
    input_tokens: int
    output_tokens: int
    effective_context: float
    """The mean input tokens of all LM calls of a question (the paper's effective context)."""
    behaviour: dict[str, float] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list, repr=False)

    def compare(self, other: Evaluation, metric: str = "em") -> BootstrapCI:
        """This evaluation against ``other`` on the questions both answered, pair by pair: the mean difference of
        ``metric`` (``em``, ``f1`` or ``acc``) in points, its paired bootstrap 95% CI and exact p-value
        (``experiments.paired.BootstrapCI``: ``diff``, ``low``, ``high``, ``n``, ``p``)."""
        if metric not in ("em", "f1", "acc"):
            raise ValueError(f"unknown metric {metric!r}; valid choices: em, f1, acc")
        mine, theirs = ({r["id"]: 100 * r[metric] for r in e.records} for e in (self, other))
        result = paired_bootstrap(mine, theirs)
        if result is None:
            raise ValueError("the two evaluations share no question id")
        return result

    def __str__(self) -> str:
        return (f"EM {self.em:.1f}  F1 {self.f1:.1f}  n={self.n} ({self.failed} failed)  "
                f"{self.effective_context:.0f} input tokens/question")  # fmt: skip


def evaluate(
    program: Method, examples: Sequence[dspy.Example], *, threads: int = 4, progress: bool = False
) -> Evaluation:
    """``program`` run on ``examples`` (``dspy.Example`` objects with ``question`` and ``answers``, as
    ``load_split`` gives them), ``threads`` questions at a time, each in its own token meter and scored by EM, F1,
    Acc and, where the question names its supporting titles, retrieval recall. A question whose program raises is
    recorded with its error and scores 0. Uses the LM and adapter of ``configure`` (or ``dspy.context``)."""
    from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, record_scores
    from ragscale.experiments.evaluate import evaluate as answer_all

    records = answer_all(program, list(examples), threads=threads, progress=progress)
    scores = record_scores(records)
    return Evaluation(
        em=scores["em"], f1=scores["f1"], acc=scores["acc"], retrieval_recall=scores["retrieval_recall"],
        n=scores["n"], failed=scores["failed"], lm_calls=sum(r["lm_calls"] for r in records),
        input_tokens=sum(r["input_tokens"] for r in records), output_tokens=sum(r["output_tokens"] for r in records),
        effective_context=scores[EFFECTIVE_CONTEXT], behaviour=scores["behaviour"],
        records=records,
    )  # fmt: skip
