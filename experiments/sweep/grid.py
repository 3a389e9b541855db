"""What a sweep varies: the grid of configurations theta = (documents k, shots m, iterations n) per method.

Iterations apply to a method that iterates (IterDRAG; others have n = 0), documents to one that retrieves;
closed-book, the baseline, has no documents and is run with 0 and 1 shots for the allocation model's
informativeness. Budgets are in tokens of effective context ("2k" = 2,000). The default grid is small, for a 2-core
CPU; the paper's (Yue et al. 2024) is ``--docs 1,2,5,10,20 --shots 0,1,2,4,8 --iterations 1,2,3``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.optimizers.teleprompters import TEACHER_OPTIMIZERS
from ragscale.programs import PROGRAMS, method_named
from ragscale.programs.closed_book import ClosedBook

R = TypeVar("R")  # a row: anything with .method and .shots
BASELINE = ClosedBook.name  # the sweep's baseline method: no documents, its question alone
METHODS = ("rag", "drag", "iterdrag")  # the paper's methods: what a sweep varies by default
DEFAULT_DOCS = (1, 2, 4)
DEFAULT_SHOTS = (0, 1)
DEFAULT_ITERATIONS = (1,)
DEFAULT_BUDGETS = (500, 1000, 2000, 4000)
DEFAULT_LIMIT = 20


def parse_size(text: str, flag: str = "budget") -> int:
    """ "16k" -> 16000, "1m" -> 1000000, "800" -> 800; anything else, or a count under one token, is a
    ``ConfigError`` naming ``flag`` and the value."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text)
    if not match:
        raise ConfigError(f"{flag} {text!r} is not a token count such as 800, 2k or 1m")
    scale = {"": 1, "k": 1000, "m": 1_000_000}[match.group(2).lower()]
    tokens = int(float(match.group(1)) * scale)
    if tokens < 1:
        raise ConfigError(f"{flag} {text!r} is not a positive token count such as 800, 2k or 1m")
    return tokens


def format_size(tokens: float) -> str:
    return f"{tokens / 1000:g}k" if tokens >= 1000 and tokens % 1000 == 0 else f"{tokens:g}"


def parse_ints(text: str, name: str, low: int = 0) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError as exc:
        raise ConfigError(f"--{name} {text!r}: expected comma-separated integers such as 1,2,5") from exc
    if not values or values[0] < low:
        raise ConfigError(f"--{name} {text!r}: expected integers >= {low}")
    return values


@dataclass(frozen=True)
class Grid:
    """What a sweep varies. `baselines` adds closed-book with 0 and 1 shots (the model's informativeness)
    and the two oracle rows (the reader given each question's gold paragraphs, alone and among retrieved
    distractors). `beyond_budget` runs also the configurations a learned estimate expects past the largest budget,
    which no budget can choose (see ``plan.status_of``)."""

    methods: tuple[str, ...] = METHODS
    docs: tuple[int, ...] = DEFAULT_DOCS
    shots: tuple[int, ...] = DEFAULT_SHOTS
    iterations: tuple[int, ...] = DEFAULT_ITERATIONS
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    baselines: bool = True
    beyond_budget: bool = False

    def __post_init__(self) -> None:
        for method in self.methods:
            if method not in PROGRAMS:
                raise ConfigError(f"unknown sweep method {method!r}; valid choices: {', '.join(sorted(PROGRAMS))}")
        if not self.budgets:
            raise ConfigError("a sweep needs at least one budget")
        below = [budget for budget in self.budgets if not budget >= 1]
        if below:
            raise ConfigError(f"budgets {', '.join(map(str, below))}: a budget is a positive token count")


@dataclass(frozen=True)
class Point:
    """One configuration of the grid; `iterations` is 0 for a method that does not iterate, `docs` 0 for one that
    does not retrieve."""

    method: str
    docs: int
    shots: int
    iterations: int = 0

    @property
    def label(self) -> str:
        text = f"{self.method} k={self.docs} m={self.shots}"
        return text + (f" n={self.iterations}" if method_named(self.method).iterates else "")


def file_label(label: str) -> str:
    """``rag k=5 m=2`` -> ``rag-k5-m2``: a configuration's label (``Point.label``, ``Row.label``) as the name of its
    run and of its published records."""
    return label.replace("=", "").replace(" ", "-")


def grid_points(grid: Grid) -> list[Point]:
    points = []
    if grid.baselines:
        points += [Point(BASELINE, 0, shots) for shots in (0, 1)]
    for method in grid.methods:
        iterations = grid.iterations if method_named(method).iterates else (0,)
        docs = grid.docs if method_named(method).retrieves else (0,)
        # Without demonstrations DRAG is RAG: the grid's RAG point stands for both (see ``rows_of``).
        shots = [m for m in grid.shots if m or method_named(method).without_demos not in grid.methods]
        points += [Point(method, k, m, n) for k, m, n in itertools.product(docs, shots, iterations)]
    return list(dict.fromkeys(points))


def rows_of(method: str, rows: Sequence[R]) -> list[R]:
    """The rows that are configurations of ``method``: its own, then, without demonstrations, those of the method
    whose program it then is (a RAG row with 0 shots is DRAG's too) where it has no row of its own with those
    documents and no shot (a sweep of both methods that ran both has each twice: its own is kept)."""
    own = [r for r in rows if r.method == method]
    alias, covered = method_named(method).without_demos, {r.docs for r in own if r.shots == 0}
    return own + [r for r in rows if r.method == alias and r.shots == 0 and r.docs not in covered]


CHAIN_OPTIMIZER = "bootstrap"
"""The teleprompter of an iterating method's demonstrations in a sweep whose optimizer is ``labeled``."""


def optimizer_of(base: RunConfig, point: Point) -> str:
    """A point's teleprompter: none without shots; for a method that iterates (IterDRAG), ``CHAIN_OPTIMIZER`` in
    place of ``labeled``, since the paper's IterDRAG demonstrations show the sub-question chain (decompose,
    answer_sub) the model generated (the teacher's, with ``--teacher``), and labels hold none where the data has no
    decomposition; else the sweep's."""
    if not point.shots:
        return "none"
    if base.optimizer == "labeled" and method_named(point.method).iterates:
        return CHAIN_OPTIMIZER
    return base.optimizer


def point_config(
    base: RunConfig, point: Point, *, docs_per_demo: int | None = None, teacher: str | None = None
) -> RunConfig:
    """The run config of a point: k documents, m demonstrations of k documents each (or `docs_per_demo`), taught
    by ``optimizer_of``, whose teacher program runs on ``teacher`` (an LM name) when it runs one."""
    optimizer = optimizer_of(base, point)
    return replace(
        base,
        method=point.method,
        docs=max(point.docs, 1),
        shots=point.shots,
        docs_per_demo=docs_per_demo if docs_per_demo is not None else point.docs,
        iterations=max(point.iterations, 1),
        optimizer=optimizer,
        teacher=teacher if optimizer in TEACHER_OPTIMIZERS else None,
        run_name=None,
    )
