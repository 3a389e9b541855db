"""How a program learns its demonstrations: the teleprompters by name (``OPTIMIZERS``), and ``compile_program``.

Each teleprompter is a DSPy ``Teleprompter`` (``base.Teleprompter``) built with its own settings and compiled as
DSPy's are: ``OPTIMIZERS[name](metric=metric, shots=..., docs_per_demo=..., ...).compile(program, trainset=...)``.

- ``none`` (``labeled.ZeroShot``): the program zero-shot (a reset copy).
- ``labeled`` (``labeled.Labeled``): DSPy's LabeledFewShot whose demonstrations carry the documents the program's own
  retriever finds for each demonstration's question (Yue et al. 2024, DRAG).
- ``bootstrap`` (``bootstrap.Bootstrap``): the program's own traces that pass the metric, the teacher run on
  ``threads`` training examples at a time after seeing labeled demonstrations, topped up with labeled ones.
- ``random-search`` (``search.RandomSearch``): ``dspy.BootstrapFewShotWithRandomSearch`` over ``num_candidates``
  bootstrapped sets.
- ``mipro`` (``search.MIPRO``): ``dspy.MIPROv2(auto="light")``: instructions and bootstrapped demonstrations searched
  together (needs ``optuna``).
- ``gepa`` (``gepa.GEPA``): instructions evolved by a reflection LM (``reflection_lm``, else the teacher, else the
  student) that reads each prediction's score and what went wrong, within ``budget``; the calls it used are logged.

The bootstrap family (bootstrap, random-search, mipro) runs DSPy's teacher program -- a copy of the program -- on
the training questions and keeps its traces as demonstrations. With ``teacher_lm`` the teacher copy runs on that LM
(DSPy's ``teacher_settings``): a larger local model writes the traces the student learns from. A trace is kept only if
it passes the metric *and* shows the method's defining step (``keeping_behaviour``: the program's
``demonstrates(example, prediction)``, e.g. IterDRAG's follow-ups on a multi-hop question): otherwise, for a small
model, the passing traces are the ones that skip the step, and the compiled program learns to skip it.

After any of them ``cap_demos`` (``demos.py``) keeps at most ``shots`` demonstrations per predictor and
``docs_per_demo`` documents per demonstration, the most relevant kept, last (DRAG's order); a program whose class
sets ``demo_documents = False`` (RAG) has its demonstrations' documents dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy

from ragscale.optimizers.base import Metric, Teleprompter, keeping_behaviour
from ragscale.optimizers.bootstrap import Bootstrap
from ragscale.optimizers.gepa import GEPA, GEPA_BUDGETS
from ragscale.optimizers.labeled import Labeled, ZeroShot
from ragscale.optimizers.search import MIPRO, RandomSearch
from ragscale.programs.base import Method

OPTIMIZERS: dict[str, type[Teleprompter]] = {
    teleprompter.name: teleprompter for teleprompter in (ZeroShot, Labeled, Bootstrap, RandomSearch, MIPRO, GEPA)
}

TEACHER_OPTIMIZERS = tuple(name for name, cls in OPTIMIZERS.items() if "teacher_lm" in cls.parameters())
"""The teleprompters that take a teacher LM: the bootstrap family runs its teacher program on it, GEPA reflects
with it when no reflection LM is given."""

__all__ = [
    "GEPA_BUDGETS", "OPTIMIZERS", "TEACHER_OPTIMIZERS", "Metric", "Teleprompter", "compile_program", "compile_with",
    "keeping_behaviour", "teleprompter",
]  # fmt: skip


def teleprompter(name: str, *, teacher_lm: dspy.LM | None = None, **settings: Any) -> Teleprompter:
    """The teleprompter ``OPTIMIZERS[name]`` built with those of ``settings`` its constructor takes (the others are
    another teleprompter's and left out). An unknown name fails listing the valid ones; a ``teacher_lm`` given to one
    that runs no teacher fails listing those that do."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid choices: {', '.join(OPTIMIZERS)}")
    cls = OPTIMIZERS[name]
    if teacher_lm is not None and "teacher_lm" not in cls.parameters():
        raise ValueError(
            f"optimizer {name!r} runs no teacher; a teacher LM needs one of: {', '.join(TEACHER_OPTIMIZERS)}"
        )
    own = {key: value for key, value in settings.items() if key in cls.parameters()}
    return cls(**own, **({"teacher_lm": teacher_lm} if teacher_lm is not None else {}))


def compile_with(
    teleprompter: dspy.teleprompt.Teleprompter,
    program: Method,
    trainset: Sequence[dspy.Example],
    *,
    lm: dspy.LM | None = None,
    adapter: dspy.Adapter | None = None,
    valset: Sequence[dspy.Example] | None = None,
) -> Method:
    """``teleprompter.compile(program, trainset=..., valset=...)`` with ``lm`` and ``adapter``, when given, used while
    compiling (otherwise ``dspy.settings``); ``valset`` is passed only when given, so any DSPy teleprompter fits."""
    settings = {name: value for name, value in (("lm", lm), ("adapter", adapter)) if value is not None}
    extra = {"valset": list(valset)} if valset is not None else {}
    with dspy.context(**settings):
        return teleprompter.compile(program, trainset=list(trainset), **extra)


def compile_program(
    program: Method,
    trainset: Sequence[dspy.Example],
    *,
    optimizer: str,
    metric: Metric,
    shots: int,
    docs_per_demo: int,
    lm: dspy.LM | None = None,
    adapter: dspy.Adapter | None = None,
    valset: Sequence[dspy.Example] | None = None,
    **settings: Any,
) -> Method:
    """Compile ``program`` on ``trainset`` with the teleprompter named ``optimizer`` and return a new program:
    ``compile_with(teleprompter(optimizer, metric=..., shots=..., docs_per_demo=..., **settings), ...)``.

    ``metric(example, pred, trace=None)`` judges bootstrapped traces and candidates (``ragscale.optimizers
    .metrics.em_metric`` or ``f1_metric``); ``lm`` and ``adapter``, when given, are used while compiling
    (otherwise ``dspy.settings``). ``valset`` scores candidates for random-search and mipro (default: the trainset,
    resp. a split of it); each costs one program run per example and candidate, so keep it small on a CPU.
    ``settings`` are the teleprompters' own, each taken by those whose constructor names it: ``seed``, ``threads``
    (how many program runs a teleprompter makes at once), ``teacher_lm`` (the bootstrap family's teacher; the others
    refuse one), ``max_attempts`` (bootstrap), ``num_candidates`` (random-search), ``reflection_lm`` and ``budget``
    (GEPA). The input ``program`` is not changed.
    """
    built = teleprompter(optimizer, metric=metric, shots=shots, docs_per_demo=docs_per_demo, **settings)
    return compile_with(built, program, trainset, lm=lm, adapter=adapter, valset=valset)
