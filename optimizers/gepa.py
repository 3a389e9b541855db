"""The ``gepa`` teleprompter: ``dspy.GEPA``, instructions evolved by a reflection LM that reads each prediction's
score and what went wrong (``feedback.with_feedback``), within a budget; the calls it used are logged."""

from __future__ import annotations

import logging
from typing import Any

import dspy

from ragscale.optimizers.base import Teleprompter
from ragscale.optimizers.feedback import with_feedback
from ragscale.programs.base import Method

logger = logging.getLogger(__name__)

GEPA_BUDGETS = ("light", "medium", "heavy")
"""GEPA's ``auto`` budgets; an integer budget caps its metric calls instead."""


class GEPA(Teleprompter):
    """``gepa``: the reflection LM is ``reflection_lm``, else ``teacher_lm``, else the student's; ``budget`` is
    ``light``, ``medium`` or ``heavy`` (GEPA's ``auto``; default ``light``) or a cap on metric calls. Candidates are
    scored on ``valset`` (default: the trainset) ``threads`` at a time. The score is the metric's: a trace that
    skips the method's step is told so in the feedback, not scored 0."""

    name = "gepa"

    def __init__(
        self, *, seed: int = 0, threads: int = 1, teacher_lm: dspy.LM | None = None,
        reflection_lm: dspy.LM | None = None, budget: str | int | None = None, **shared: Any,
    ):  # fmt: skip
        super().__init__(**shared)
        if budget is not None and budget not in GEPA_BUDGETS and not (str(budget).isdigit() and int(budget) > 0):
            raise ValueError(
                f"budget must be one of {', '.join(GEPA_BUDGETS)} or a number of metric calls, got {budget!r}"
            )
        self.seed, self.threads, self.teacher_lm, self.reflection_lm = seed, threads, teacher_lm, reflection_lm
        self.budget = budget

    def learn(self, student: Method, trainset: list, valset: list | None) -> Method:
        reflection_lm = self.reflection_lm or self.teacher_lm or dspy.settings.lm
        budget = self.budget or "light"
        limit = {"auto": budget} if budget in GEPA_BUDGETS else {"max_metric_calls": int(budget)}
        teleprompter = dspy.GEPA(
            metric=with_feedback(self.metric, student), reflection_lm=reflection_lm, seed=self.seed,
            num_threads=self.threads, track_stats=True, **limit,
        )  # fmt: skip
        compiled = teleprompter.compile(student, trainset=trainset, valset=valset or trainset)
        used = getattr(getattr(compiled, "detailed_results", None), "total_metric_calls", None)
        logger.info("GEPA used %s metric calls (budget %s)", used, budget)
        return compiled
