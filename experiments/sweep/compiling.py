"""A sweep's programs compiled: once per method and shot count, at the point whose demonstrations every point of the
group is cut from, kept as JSON for later sittings, and the teacher LM those compiles share.

Shots are demonstrations learned by the teleprompter, compiled once per method and shot count (with the largest
document count of the grid, and IterDRAG's largest iteration count) and reused across document and iteration counts
(``run_experiment(compiled=...)``, demos cut to the configuration's k documents each, as DRAG's demonstrations carry
as many documents as the test question)."""

from __future__ import annotations

import copy
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from ragscale.experiments.config import RunConfig
from ragscale.experiments.identity import config_key
from ragscale.experiments.parts import build_program_for, compile_for, load_teacher_for, teaches_itself
from ragscale.experiments.sweep.grid import Grid, Point, point_config
from ragscale.experiments.sweep.plan import PlannedPoint
from ragscale.optimizers.demos import cap_demos, redraw_demo_documents
from ragscale.optimizers.floors import CompilationFailedError
from ragscale.optimizers.method import check_loaded
from ragscale.programs import method_named
from ragscale.programs.lm import make_adapter, release_lm

logger = logging.getLogger(__name__)

CHAIN_DOCS = 5
"""The documents per query at which an iterating method's chains are bootstrapped: enough for the teacher to find
most answers, few enough that its longest prompt (synthesize over every document gathered, beside its labeled
demonstrations) fits this machine's memory at the grid's largest n."""


def compile_point(point: Point, grid: Grid) -> Point:
    """Where the program of ``point``'s method and shots is compiled, once for all its points. At the grid's largest
    k, whose demonstrations every point's are cut from (``cap_demos``: the most relevant k kept); for a method that
    iterates, at ``CHAIN_DOCS`` (or the grid's largest k if smaller) and the largest n: its teacher runs the whole
    chain on every training question, and at k = 50 that is prompts of tens of thousands of tokens, several at once.
    Each point's demonstrations then show the documents their queries retrieve at its own k (``demonstrations``)."""
    if not method_named(point.method).iterates:
        return Point(point.method, max(grid.docs), point.shots, 0)
    return Point(point.method, min(max(grid.docs), CHAIN_DOCS), point.shots, max(grid.iterations))


def demonstrations(compiled, point: Point, config: RunConfig):
    """A copy of the program ``compiled`` for ``point``'s group, cut to the point's shots and documents per
    demonstration; a method that iterates first has its demonstrations' documents retrieved again at the point's k
    (``redraw_demo_documents``), since its chains were written at ``compile_point``'s."""
    program = copy.deepcopy(compiled)
    if method_named(point.method).iterates:
        redraw_demo_documents(program, config.docs)
    return cap_demos(program, point.shots, config.docs_per_demo)


def compiled_path(folder: Path, config: RunConfig, fingerprint: str) -> Path:
    """Where a sweep keeps the program it compiled with ``config`` on the data of ``fingerprint``: named by its
    method, shots and key, so that a program compiled with other settings or data is never loaded."""
    return Path(folder) / f"{config.method}-m{config.shots}-{config_key(config, fingerprint)}.json"


def compile_once(
    config: RunConfig, train: Sequence, *, lm, retriever, saved: Path | None = None,
    load_teacher: Callable[[RunConfig], Any] = load_teacher_for,
):  # fmt: skip
    """The program of ``config`` (a ``compile_point``'s) compiled on ``train`` by its teleprompter, its teacher
    program on ``load_teacher(config)`` when the config has a teacher. A program an earlier sitting compiled with the
    same settings and data, kept as JSON at ``saved`` (``compiled_path``), is loaded instead: the same
    demonstrations in every sitting, on every machine that adopts the sweep, and no teacher run again; one compiled
    now is kept there. Either way it is checked against its method's floors on the training questions held back
    from compiling (``check_loaded``): a kept program below a floor is moved aside (``<name>.below-floor``, out of
    the sweep's and publishing's ``*.json``) and the group compiled again, so that a sweep adopting programs made
    before the check, or by older code, is not held to them; one compiled now that falls below raises."""
    adapter = make_adapter(config.adapter)
    with dspy.context(lm=lm, adapter=adapter):
        if saved is not None and saved.exists():
            program = build_program_for(config, retriever)
            program.load(str(saved))
            try:
                return check_loaded(program, train, optimizer=config.optimizer, threads=config.threads)
            except CompilationFailedError as refused:
                aside = saved.with_name(saved.name + ".below-floor")
                saved.replace(aside)
                logger.warning("the kept program %s is refused (%s); compiling its group again, the kept one moved "
                               "to %s", saved.name, refused, aside.name)  # fmt: skip
        teacher_lm = None if config.teacher is None else lm if teaches_itself(config) else load_teacher(config)
        program = compile_for(config, build_program_for(config, retriever), train, lm, adapter, teacher_lm=teacher_lm)
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        program.save(str(saved))
    return program


Group = tuple[str, int]
"""A method and a shot count: the points that share one compiled program."""


@dataclass
class Compiles:
    """The programs of a sweep's groups, each compiled once, by the first of its points that needs it (the others
    wait for it) at ``compile_point``, and kept in ``keep_in``; and the teacher LM, loaded by the first compile that
    runs a teacher program and released once every compile that runs one has been tried, its memory left to the
    student's decode graphs. ``shared`` is the sweep's lock over what its runs share; ``begin``, ``skipped`` and
    ``will_run`` are called holding it."""

    grid: Grid
    base: RunConfig
    settings: tuple[int | None, str | None]  # (docs_per_demo, teacher), as ``point_config`` takes them
    reader: tuple[Sequence, Any]  # (train, retriever): what every compile is taught on and searches
    saved: tuple[Path, str]  # (keep_in, fingerprint): where a compiled program is kept (``compiled_path``)
    shared: threading.Lock
    _compiled: dict[Group, Any] = field(default_factory=dict)
    _compiling: dict[Group, threading.Lock] = field(default_factory=dict)  # one per group: each compiled once
    _teachers: list = field(default_factory=list)
    _taught: set[Group] = field(default_factory=set)  # the groups whose compile runs the teacher
    _tried: set[Group] = field(default_factory=set)
    _unstarted: Counter[Group] = field(default_factory=Counter)  # of each group, points not begun

    def config(self, point: Point) -> RunConfig:
        """``point_config`` of ``point`` with the sweep's documents per demonstration and teacher."""
        docs_per_demo, teacher = self.settings
        return point_config(self.base, point, docs_per_demo=docs_per_demo, teacher=teacher)

    def expect(self, todo: Sequence[PlannedPoint]) -> None:
        """The points that will run: the compiles that run the teacher, and each group's points not begun."""
        self._taught = {(p.point.method, p.point.shots) for p in todo if p.point.shots and self.config(p.point).teacher}
        self._unstarted = Counter((p.point.method, p.point.shots) for p in todo)

    def begin(self, point: Point) -> None:
        """``point`` begins (it runs or it is skipped)."""
        self._unstarted[point.method, point.shots] -= 1

    def skipped(self, point: Point) -> None:
        """``point`` is skipped: its group's compile is left to a point of it that runs, if one does."""
        group = (point.method, point.shots)
        if not self._unstarted[group] and group not in self._compiling:
            self._done_with(group)

    def will_run(self, point: Point) -> None:
        """``point`` runs: its group's compile, once tried, marks the group tried."""
        self._compiling.setdefault((point.method, point.shots), threading.Lock())

    def program(self, point: Point, replica) -> Any:
        """The compiled program of ``point``'s group, compiled now on ``replica`` unless it was already."""
        group = (point.method, point.shots)
        with self.shared:
            group_lock = self._compiling.setdefault(group, threading.Lock())
        with group_lock:
            if group not in self._compiled:
                (train, retriever), (keep_in, fingerprint) = self.reader, self.saved
                config = self.config(compile_point(point, self.grid))
                try:
                    self._compiled[group] = compile_once(
                        config, train, lm=replica, retriever=retriever,
                        saved=compiled_path(keep_in, config, fingerprint), load_teacher=self._teacher,
                    )  # fmt: skip
                finally:  # a compile that failed is tried again by its group's next point, loading the teacher again
                    with self.shared:
                        self._done_with(group)
            return self._compiled[group]

    def _teacher(self, config: RunConfig):
        with self.shared:
            if not self._teachers:
                self._teachers.append(load_teacher_for(config))
            return self._teachers[0]

    def _done_with(self, group: Group) -> None:  # under `shared`: its compile was tried, or every point skipped
        self._tried.add(group)
        if self._teachers and self._taught <= self._tried:
            release_lm(self._teachers.pop())
