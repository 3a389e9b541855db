"""What every teleprompter of ragscale shares: DSPy's ``Teleprompter`` with its settings in the constructor, and a
compiled program cut to ``shots`` and ``docs_per_demo``.

A teleprompter is built with its own settings (``metric``, ``shots``, ``docs_per_demo`` and what it adds: ``seed``,
``threads``, ``teacher_lm``, ...) and compiles as DSPy's do, ``compile(student, *, trainset, valset=None)``,
returning a new program. Each subclass learns its demonstrations in ``learn``; ``compile`` then keeps at most
``shots`` demonstrations per predictor and ``docs_per_demo`` documents per demonstration (``demos.cap_demos``).

``keeping_behaviour`` is the metric a teleprompter that keeps traces judges them by: a trace that skips the method's
defining step is no demonstration.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import dspy
from dspy.teleprompt.teleprompt import Teleprompter as DSPyTeleprompter

from ragscale.optimizers.demos import cap_demos
from ragscale.programs.base import Method

logger = logging.getLogger(__name__)

Metric = Callable[..., float]


def keeping_behaviour(metric: Metric, program: Method) -> Metric:
    """``metric``, except that a bootstrapped trace (``trace`` given) of a program that does not show its defining
    step (``program.demonstrates(example, prediction)`` False) scores 0. Scoring without a trace (candidates,
    evaluation) is unchanged. A program that keeps ``Method``'s own ``demonstrates`` (every trace shows its step)
    keeps ``metric`` as it is."""
    if type(program).demonstrates is Method.demonstrates:
        return metric

    def accepted(example: dspy.Example, prediction: dspy.Prediction, trace=None) -> float:
        score = metric(example, prediction, trace)
        if trace is None or program.demonstrates(example, prediction):
            return score
        return 0.0

    accepted.__name__ = getattr(metric, "__name__", "metric")
    return accepted


class Teleprompter(DSPyTeleprompter):
    """A ragscale teleprompter (see the module docstring); a subclass sets ``name`` and overrides ``learn``.

    Each constructor argument is kept as the attribute of the same name, so ``replaced`` can copy a teleprompter
    with some of them changed and ``parameters`` lists what a registry may pass it.
    """

    name: ClassVar[str]
    """Its name in ``OPTIMIZERS`` and on the command line (``ragscale run --optimizer NAME``)."""

    def __init__(self, *, metric: Metric | None = None, shots: int, docs_per_demo: int):
        if shots < 0 or docs_per_demo < 0:
            raise ValueError(f"shots ({shots}) and docs_per_demo ({docs_per_demo}) must be >= 0")
        self.metric, self.shots, self.docs_per_demo = metric, shots, docs_per_demo

    def compile(
        self, student: Method, *, trainset: Sequence[dspy.Example], valset: Sequence[dspy.Example] | None = None
    ) -> Method:
        """A new program: ``student`` with the demonstrations (and instructions) learned on ``trainset``, cut to
        ``shots`` and ``docs_per_demo``; ``valset`` scores candidates where the teleprompter has any. ``student``
        is not changed."""
        logger.info("compiling %s with %s on %d examples", type(student).__name__, self.name, len(trainset))
        compiled = self.learn(student, list(trainset), None if valset is None else list(valset))
        return cap_demos(compiled, self.shots, self.docs_per_demo)

    def learn(self, student: Method, trainset: list, valset: list | None) -> Method:
        """The compiled program before the cut to ``shots`` and ``docs_per_demo``."""
        raise NotImplementedError

    @property
    def teacher_settings(self) -> dict[str, Any]:
        """DSPy's ``teacher_settings``: the teacher program runs on ``teacher_lm``, when there is one."""
        teacher = getattr(self, "teacher_lm", None)
        return {"lm": teacher} if teacher is not None else {}

    def replaced(self, **changes: Any) -> Teleprompter:
        """A copy with the constructor arguments ``changes`` changed (a grader compiled as the program was, on
        another metric)."""
        unknown = set(changes) - self.parameters()
        if unknown:
            raise TypeError(f"{type(self).__name__} takes no {', '.join(sorted(unknown))}")
        replaced = copy.copy(self)
        vars(replaced).update(changes)
        return replaced

    @classmethod
    def parameters(cls) -> set[str]:
        """The keyword arguments its constructor takes, its base classes' included."""
        names: set[str] = set()
        for klass in cls.__mro__:
            if klass is DSPyTeleprompter:
                break
            if "__init__" in vars(klass):
                names |= {
                    p.name for p in inspect.signature(klass.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY
                }
        return names
