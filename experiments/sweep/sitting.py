"""One sitting of a sweep: how it runs (``SweepOptions``), what it runs with and what it has done so far
(``Sitting``, opened by ``open_sitting``), shared by its runs (``run.py``) and by what it writes when it ends
(``outcome.py``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from ragscale.experiments import resume
from ragscale.experiments.config import RunConfig
from ragscale.experiments.identity import data_fingerprint
from ragscale.experiments.sweep.estimate import Planner
from ragscale.experiments.sweep.grid import Grid
from ragscale.experiments.sweep.oracle_rows import ORACLE_NOTE
from ragscale.experiments.sweep.plan import PlannedPoint, format_plan, plan
from ragscale.experiments.sweep.setup import Loaded, Setup, load_setup
from ragscale.experiments.sweep.stopping import Stopper
from ragscale.programs.lm import context_window


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs, beside its grid and base config.

    ``docs_per_demo``: documents per demonstration (default: k, the paper's). ``teacher`` (an LM name) runs the
    teacher programs of the compiles that have one (``grid.optimizer_of``); it is loaded by the first and released
    after the last. ``parallel_runs`` configurations run at once, in threads, spread over the LM's replicas.
    ``stop_after`` seconds after it starts, the sweep stops (``TimeLimitError``). ``adopt_from`` names a published
    sweep (``adopt.adopt``) whose rows count as finished here. ``progress`` draws each run's progress bar when one
    runs at a time."""

    docs_per_demo: int | None = None
    teacher: str | None = None
    parallel_runs: int = 1
    stop_after: float | None = None
    adopt_from: Path | None = None
    progress: bool = True


@dataclass
class Sitting:
    """A sweep's sitting: its grid, base config and options, what it loaded (``got``), its planner and plan, its MLflow
    run (``parent``, and ``lock``, its work folder's lock held while the sweep runs), the LM's context window, the
    questions' ``data_fingerprint``, where it reports, what stops it (``stopper``), and the keys it ran, that failed and
    that it left at its time limit.
    ``shared`` is the one lock over what its runs share: the ledger and its file, these lists, the planner, MLflow
    tags and ``report``."""

    grid: Grid
    base: RunConfig
    options: SweepOptions
    got: Setup
    planner: Planner
    planned: list[PlannedPoint]
    parent: str
    window: int
    fingerprint: str
    report: Callable[[str], None]
    stopper: Stopper = field(default_factory=Stopper)
    shared: threading.Lock = field(default_factory=threading.Lock)
    ran: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # keys not run, or ended, at the time limit: a rerun runs them
    lock: IO | None = None


def open_sitting(
    grid: Grid, base: RunConfig, options: SweepOptions, loaded: Loaded, sweep_dir: Path, report: Callable[[str], None],
    *, deadline: float | None = None,
) -> Sitting:  # fmt: skip
    """A sitting of the sweep in ``sweep_dir``: what it needs loaded (``load_setup``, its LM's timed calls given up at
    ``deadline``, the time limit), its plan reported, its MLflow run started, with its lock held
    (``resume.start_claimed``)."""
    got = load_setup(grid, base, sweep_dir, loaded, progress=options.progress, deadline=deadline)
    planner = Planner.for_run(base, got.lm, got.train, got.evalset, retriever=got.retriever, speed=got.speed)
    planned = plan(
        grid, base, lm=got.lm, train=got.train, evalset=got.evalset, ledger=got.ledger, speed=got.speed,
        docs_per_demo=options.docs_per_demo, teacher=options.teacher, tracked=got.tracked, retriever=got.retriever,
        planner=planner,
    )  # fmt: skip
    report(format_plan(planned, planner.speed, len(got.evalset)) + (f"\n{ORACLE_NOTE}" if grid.baselines else ""))
    window = context_window(got.lm)
    if options.parallel_runs > 1 and not base.lm.startswith("openai/"):
        report(
            f"{options.parallel_runs} configurations at once share the local model's one engine, which batches their "
            "requests"
        )
    fingerprint = data_fingerprint(got.train, got.evalset)
    parent, lock = resume.start_claimed(
        base.runs_dir,
        run_name=f"sweep-{sweep_dir.name}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}",
        params={
            **{f"grid.{k}": ",".join(map(str, v)) if isinstance(v, tuple) else str(v) for k, v in asdict(grid).items()},
            **{f"base.{k}": v for k, v in base.to_params().items()},
            "data_fingerprint": fingerprint,
            "docs_per_demo": str(options.docs_per_demo),
            "teacher": str(options.teacher),
            "parallel_runs": str(options.parallel_runs),
        },
        tags={"dataset": base.dataset, "lm": base.lm},
        kind="sweep",
    )
    return Sitting(grid, base, options, got, planner, planned, parent, window, fingerprint, report, lock=lock)
