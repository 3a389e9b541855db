"""A method compiled whole: its program by a teleprompter, then its graders (CRAG's, Self-RAG's) on their own
relevance labels by the same teleprompter and teacher. ``ragscale run`` and ``ragscale.compile`` both compile so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy

from ragscale.optimizers.base import Teleprompter
from ragscale.optimizers.graders import compile_graders
from ragscale.optimizers.teleprompters import Metric, compile_program, compile_with
from ragscale.programs.base import Method


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
    ``settings`` are the program's teleprompter's alone."""
    own = {key: settings.pop(key) for key in ("valset", "num_candidates", "max_attempts") if key in settings}
    compiled = compile_program(program, list(trainset), optimizer=optimizer, metric=metric, shots=shots,
                               docs_per_demo=docs_per_demo, threads=threads, **settings, **own)  # fmt: skip
    return compile_graders(compiled, list(trainset), optimizer=optimizer, shots=shots, threads=threads, **settings)


def compile_method_with(
    teleprompter: dspy.teleprompt.Teleprompter, program: Method, trainset: Sequence[dspy.Example], **context: Any
) -> Method:
    """``program`` compiled by a teleprompter already built (``context``: ``compile_with``'s lm, adapter and
    valset): one of ragscale's (``OPTIMIZERS``) compiles the program, then its graders by a copy of itself on their
    relevance labels (``Teleprompter.replaced``); any other DSPy teleprompter compiles the whole program, graders
    included, as it does any program."""
    compiled = compile_with(teleprompter, program, trainset, **context)
    if not isinstance(teleprompter, Teleprompter):
        return compiled
    lm, adapter = context.get("lm"), context.get("adapter")
    return compile_graders(compiled, list(trainset), optimizer=teleprompter, shots=teleprompter.shots, lm=lm,
                           adapter=adapter)  # fmt: skip
