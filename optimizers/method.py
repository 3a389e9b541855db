"""A method compiled whole: its program by a teleprompter, then its graders (CRAG's, Self-RAG's) on their own
relevance labels by the same teleprompter and teacher, then checked against its method's floors on training
questions held back from both (``floors.py``). A compilation below a floor is made again from other traces, the
training questions drawn in another order (the next seeds), ``RECOMPILES`` times at most before it is refused.
``ragscale run`` and ``ragscale.compile`` both compile so."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import dspy

from ragscale.optimizers import floors
from ragscale.optimizers.base import Teleprompter
from ragscale.optimizers.graders import compile_graders
from ragscale.optimizers.teleprompters import Metric, compile_program, compile_with
from ragscale.programs.base import Method

logger = logging.getLogger(__name__)

RECOMPILES = 2
"""How many times a compilation that falls below a floor is made again, each from the training questions drawn in
another order, before ``CompilationFailedError`` refuses it."""


def compile_method(
    program: Method,
    trainset: Sequence[dspy.Example],
    *,
    optimizer: str,
    metric: Metric,
    shots: int,
    docs_per_demo: int,
    threads: int = 1,
    **settings: Any,
) -> Method:
    """``compile_program`` then ``compile_graders`` with the same ``shots``, ``threads`` and ``settings`` (lm,
    adapter, seed, teacher_lm, reflection_lm, budget); ``valset``, ``num_candidates`` and ``max_attempts`` among
    ``settings`` are the program's teleprompter's alone. A method with floors has the last ``floors.held_back_size``
    training questions held back and the compiled program checked on them (``floors.check``); one below a floor is
    compiled again with the next seed, up to ``RECOMPILES`` times, and then ``CompilationFailedError`` names every
    attempt's shortfall. The means measured are left on the program kept as ``held_back_behaviour``."""
    own = {key: settings.pop(key) for key in ("valset", "num_candidates", "max_attempts") if key in settings}
    train, held_back = _held_back(program, trainset, compiles=optimizer != "none")
    seed, refused = settings.pop("seed", 0), []
    for attempt in range(RECOMPILES + 1 if held_back else 1):
        compiled = compile_program(program, train, optimizer=optimizer, metric=metric, shots=shots,
                                   docs_per_demo=docs_per_demo, threads=threads, seed=seed + attempt, **settings,
                                   **own)  # fmt: skip
        compiled = compile_graders(compiled, train, optimizer=optimizer, shots=shots, threads=threads,
                                   seed=seed + attempt, **settings)  # fmt: skip
        try:
            return _checked(compiled, held_back, threads, settings.get("lm"), settings.get("adapter"))
        except floors.CompilationFailedError as below:
            if not below.shortfalls:  # nothing measured (every held-back question failed): another set cannot help
                raise
            refused.append(f"seed {seed + attempt}: {below.shortfalls}")
            if attempt < RECOMPILES:
                logger.warning("%s; compiling again from other traces (seed %d)", below, seed + attempt + 1)
    raise floors.CompilationFailedError(
        f"compiled {program.name} fell below its floor on {len(program.floor_examples(held_back))} held-back training "
        f"questions with each of {len(refused)} demonstration sets, the training questions drawn in another order "
        f"each time ({'; '.join(refused)}). {floors.ADVICE}",
        "; ".join(refused),
    )


def compile_method_with(
    teleprompter: dspy.teleprompt.Teleprompter, program: Method, trainset: Sequence[dspy.Example], **context: Any
) -> Method:
    """``program`` compiled by a teleprompter already built (``context``: ``compile_with``'s lm, adapter and
    valset): one of ragscale's (``OPTIMIZERS``) compiles the program, then its graders by a copy of itself on their
    relevance labels (``Teleprompter.replaced``) and the result is checked against its floors, as ``compile_method``
    does; any other DSPy teleprompter compiles the whole program, graders included, as it does any program."""
    ours = isinstance(teleprompter, Teleprompter)
    train, held_back = _held_back(program, trainset, compiles=ours and teleprompter.name != "none")
    compiled = compile_with(teleprompter, program, train, **context)
    if not ours:
        return compiled
    lm, adapter = context.get("lm"), context.get("adapter")
    compiled = compile_graders(compiled, train, optimizer=teleprompter, shots=teleprompter.shots, lm=lm,
                               adapter=adapter)  # fmt: skip
    return _checked(compiled, held_back, getattr(teleprompter, "threads", 1), lm, adapter)


def check_loaded(program: Method, trainset: Sequence[dspy.Example], *, optimizer: str, threads: int = 1) -> Method:
    """``program``, compiled earlier by ``optimizer`` on ``trainset`` and loaded from its JSON, checked against its
    floors on the questions ``compile_method`` held back from it, with the LM and adapter of the caller's DSPy
    context: a program saved before the floors were checked, or edited since, is held to them as one compiled now
    is (``CompilationFailedError`` below a floor)."""
    _, held_back = _held_back(program, trainset, compiles=optimizer != "none")
    return _checked(program, held_back, threads, None, None)


def _held_back(program: Method, trainset: Sequence[dspy.Example], *, compiles: bool) -> tuple[list, list]:
    """(compiled on, held back): the last ``floors.held_back_size`` questions held back when a teleprompter
    ``compiles`` a program (``none`` does not)."""
    held = floors.held_back_size(program, trainset) if compiles else 0
    trainset = list(trainset)
    return trainset[: len(trainset) - held], trainset[len(trainset) - held :]


def _checked(compiled: Method, held_back: list, threads: int, lm, adapter) -> Method:
    """``compiled``, checked against its floors on ``held_back`` with ``lm`` and ``adapter`` (when given)."""
    settings = {name: value for name, value in (("lm", lm), ("adapter", adapter)) if value is not None}
    with dspy.context(**settings):
        compiled.held_back_behaviour = floors.check(compiled, held_back, threads=threads) if held_back else {}
    return compiled
