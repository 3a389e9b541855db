"""The teleprompters that search over candidate programs, scoring each on ``valset``: ``random-search`` (DSPy's
``BootstrapFewShotWithRandomSearch`` over ``num_candidates`` bootstrapped sets) and ``mipro`` (``dspy.MIPROv2``,
``auto="light"``: instructions and bootstrapped demonstrations searched together; needs ``optuna``).

Both run DSPy's teacher program (on ``teacher_lm`` when given) and judge its traces by ``keeping_behaviour``. They
score their candidates before ``compile`` cuts demonstrations to ``shots`` and ``docs_per_demo``, and are not topped
up with labeled demonstrations: what they pick is what they measured, less any documents over the cap.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import dspy

from ragscale.optimizers.base import Teleprompter, keeping_behaviour
from ragscale.programs.base import Method


class RandomSearch(Teleprompter):
    """``random-search``: the best of ``num_candidates`` bootstrapped programs on ``valset`` (default: the
    trainset), scored ``threads`` program runs at a time."""

    name = "random-search"

    def __init__(self, *, num_candidates: int = 4, threads: int = 1, teacher_lm: dspy.LM | None = None, **shared: Any):
        super().__init__(**shared)
        self.num_candidates, self.threads, self.teacher_lm = num_candidates, threads, teacher_lm

    def learn(self, student: Method, trainset: list, valset: list | None) -> Method:
        teleprompter = dspy.BootstrapFewShotWithRandomSearch(
            metric=keeping_behaviour(self.metric, student),
            teacher_settings=self.teacher_settings,
            max_bootstrapped_demos=self.shots,
            max_labeled_demos=0,
            num_candidate_programs=self.num_candidates,
            num_threads=self.threads,
        )
        return teleprompter.compile(student, trainset=trainset, valset=valset)


class MIPRO(Teleprompter):
    """``mipro``: ``dspy.MIPROv2(auto="light")`` with ``shots`` bootstrapped demonstrations, scored on ``valset``
    (default: a split of the trainset)."""

    name = "mipro"

    def __init__(self, *, seed: int = 0, threads: int = 1, teacher_lm: dspy.LM | None = None, **shared: Any):
        super().__init__(**shared)
        self.seed, self.threads, self.teacher_lm = seed, threads, teacher_lm

    def learn(self, student: Method, trainset: list, valset: list | None) -> Method:
        if importlib.util.find_spec("optuna") is None:  # checked first: DSPy needs it only after proposing
            raise ImportError(
                "the mipro optimizer needs optuna, an optional dependency of DSPy: pip install 'optuna>=3.4'"
            )
        teleprompter = dspy.MIPROv2(
            metric=keeping_behaviour(self.metric, student),
            auto="light",
            max_bootstrapped_demos=self.shots,
            max_labeled_demos=0,
            num_threads=self.threads,
            seed=self.seed,
            verbose=False,
            teacher_settings=self.teacher_settings,
        )
        return teleprompter.compile(student, trainset=trainset, valset=valset)
