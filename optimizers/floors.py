"""Whether a compiled program still does what its method is: its ``floors`` measured on held-back training questions.

A teleprompter keeps what scores, and a demonstration set can teach a program to skip the step that defines its
method: IterDRAG shown a stop writes "none" at once and answers as DRAG does. So ``compile_method`` holds the last
``held_back_size`` training questions back from the teleprompter, runs the compiled program on them, and averages
each behaviour its method declares a floor for (``Method.floors``, over ``Method.floor_examples``). Below a floor
the compilation failed: ``CompilationFailedError`` names the method, the behaviour, its mean, the floor and the
questions, rather than a program that is another method going on under its name.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import dspy

from ragscale.programs.base import Method

logger = logging.getLogger(__name__)

HELD_BACK = 8
"""The most training questions held back from compiling to measure the floors on."""


ADVICE = (
    "Its demonstrations teach it to skip its defining step; compile with more training questions (--train-limit), "
    "a teacher (--teacher), or another optimizer"
)
"""What a refused compilation's message suggests."""


class CompilationFailedError(RuntimeError):
    """A compiled program fell below a floor of its method on the held-back questions; ``shortfalls`` says which
    means fell short (``""`` when none could be measured)."""

    def __init__(self, message: str, shortfalls: str = ""):
        super().__init__(message)
        self.shortfalls = shortfalls


def held_back_size(program: Method, trainset: Sequence[dspy.Example]) -> int:
    """How many training questions to hold back: none for a method without floors, else a quarter of the
    trainset, at most ``HELD_BACK``, so that at least three quarters are still compiled on."""
    return min(HELD_BACK, len(trainset) // 4) if program.floors else 0


def measure(program: Method, examples: Sequence[dspy.Example], *, threads: int = 1) -> dict[str, float]:
    """The mean of each behaviour ``program``'s method has a floor for, over ``examples`` (``floor_examples`` of
    them), answered ``threads`` at a time; ``{}`` when none of them is one a floor is measured on. A question the
    program fails on (a server down, an unreadable answer) is left out of the means and logged; when every one fails,
    ``CompilationFailedError`` says so with the first error."""
    measured = program.floor_examples(examples)
    if not measured:
        return {}

    def shown(example: dspy.Example) -> dict[str, float] | Exception:
        try:
            return program.behaviour(example.question, program(**example.inputs()))
        except Exception as error:
            logger.warning("held-back question %r failed: %s", example.question, error)
            return error

    with ThreadPoolExecutor(max(1, threads)) as pool:  # each question in a copy of the caller's DSPy settings
        values = [run.result() for run in [pool.submit(contextvars.copy_context().run, shown, ex) for ex in measured]]
    answered = [value for value in values if not isinstance(value, Exception)]
    if not answered:
        raise CompilationFailedError(
            f"compiled {program.name} failed on all {len(values)} held-back training questions, so its floors could "
            f"not be measured; the first error: {values[0]}"
        )
    return {name: sum(v.get(name, 0.0) for v in answered) / len(answered) for name, _ in program.floors}


def check(program: Method, examples: Sequence[dspy.Example], *, threads: int = 1) -> dict[str, float]:
    """``measure`` on ``examples``, raising ``CompilationFailedError`` when a mean falls below its floor."""
    measured = measure(program, examples, threads=threads)
    below = [(name, least) for name, least in program.floors if name in measured and measured[name] < least]
    if below:
        shortfalls = "; ".join(f"{name} {measured[name]:.2f} < floor {least:.2f}" for name, least in below)
        raise CompilationFailedError(
            f"compiled {program.name} fell below its floor on {len(program.floor_examples(examples))} held-back "
            f"training questions: {shortfalls}. {ADVICE}",
            shortfalls,
        )
    if measured:
        logger.info("compiled %s kept its floors on held-back questions: %s", program.name, measured)
    return measured
