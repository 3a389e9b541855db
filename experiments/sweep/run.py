"""Running a sweep: plan it, run what is not done yet as MLflow child runs, and report what it found.

``run_sweep(grid, base, options, loaded)`` opens a sitting (``sitting.py``: what it loaded, ``setup.py``; its plan;
its MLflow run), runs the planned configurations (``_Runs``), then the oracle rows (``oracle_rows.py``), and writes
what it found (``outcome.py``). Programs are compiled once per method and shot count (``compiling.py``); the
configurations are spread over the LM's replicas (``replicas.py``); a time limit, Ctrl-C or SIGTERM stops it
(``stopping.py``).

Each configuration is re-estimated just before it runs, with what the ones finished by then taught, and keeps that
estimate with its result. IterDRAG under a larger iteration cap carries the questions whose loop stopped before a
finished smaller cap (``carry.py``): they would be asked the same way. A configuration that fails does not stop the
sweep; a rerun retries it and skips the finished ones. The configurations run cheapest first by their estimate,
whatever their method, so a sweep stopped by its time limit has filled the small budgets. ``plan_only`` prints the
plan without running, ``allocate`` reads the stored allocation model.

Several configurations may run at once (``parallel_runs``), each on one of the LM's servers: ``api_base`` may name
several replicas of one model, comma-separated, of which those that answer when the sweep starts are used (each that
does not is reported and left out). Each configuration takes the least busy replica when it starts, is tried once more
on another when it fails there, is recorded with the replica that ran it, and carries the whole list, sorted, as its
``api_base``: the replicas are one server, so a configuration's key (which names ``api_base``) does not depend on the
replica that answered it, and a rerun given the same URLs, in any order, skips the finished configurations. One URL is
kept as given, so single-server keys are what they were; adding or removing a replica changes every key. Ctrl-C or
SIGTERM cancels the configurations not started and ends those running at their next LM or module call, or at once
while they wait for their questions (``stopping.py``), each KILLED with its finished questions kept, as a run stopped
alone is.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.files import disk_error
from ragscale.experiments.runner import run_experiment
from ragscale.experiments.signals import Stopped, interrupted
from ragscale.experiments.sweep.adopt import adopt
from ragscale.experiments.sweep.carry import carried, program_digest
from ragscale.experiments.sweep.compiling import Compiles, demonstrations
from ragscale.experiments.sweep.estimate import Planner, estimate_fields
from ragscale.experiments.sweep.grid import Grid, file_label
from ragscale.experiments.sweep.ledger import (
    COMPILED,
    ESTIMATE_TAG,
    REPLICA_TAG,
    SWEEP_KEY_TAG,
    ledger_row,
    run_records,
    save_ledger,
    sweep_dir_for,
)
from ragscale.experiments.sweep.oracle_rows import ORACLE_NOTE, oracle_rows
from ragscale.experiments.sweep.outcome import SweepResult, conclude
from ragscale.experiments.sweep.plan import PlannedPoint, format_plan, plan, run_order, status_of
from ragscale.experiments.sweep.replicas import Replicas, load_replicas, shared_api_base
from ragscale.experiments.sweep.rows import Row
from ragscale.experiments.sweep.setup import Loaded, load_setup
from ragscale.experiments.sweep.sitting import Sitting, SweepOptions, open_sitting
from ragscale.optimizers.context import ContextWindowError

log = logging.getLogger(__name__)


def run_sweep(
    grid: Grid,
    base: RunConfig,
    options: SweepOptions | None = None,
    loaded: Loaded | None = None,
    *,
    sweep_dir: Path | None = None,
    report: Callable[[str], None] = log.info,
) -> SweepResult:
    """Plan, run what is not done yet, and summarise; see the module docstring and ``SweepOptions``. ``report``
    receives the plan, the table and the allocation summary as text (the CLI prints them), and a configuration's
    lines each begin with its number and label, as those of runs at once interleave. ``sweep_dir`` defaults to the
    dataset's, LM's and corpus's folder under ``base.runs_dir`` (``sweep_dir_for``).

    ``options.parallel_runs`` configurations run at once, in threads, spread over ``loaded.lm``: an LM or a list of
    them, one per replica (default: one per URL of ``base.api_base`` that answers, loaded once each; see
    ``load_replicas``). Every configuration carries ``base.api_base`` whole, sorted (``shared_api_base``), whichever
    replica served it, so its key is the same on a rerun given the same URLs in any order. Runs at once on a local
    model share its one engine, which batches their requests. Each run's progress bar is drawn only when one runs at
    a time. The oracle rows run after the grid, one after the other, on the first LM. The teacher is loaded by the
    first compile that runs a teacher program and released after the last, its memory left to the student's decode
    graphs.

    ``options.stop_after`` seconds after it starts, the sweep stops (``TimeLimitError``): the configurations running
    end at their next LM or module call (their finished questions kept: a rerun resumes them), those not started are
    left, and it reports and plots what finished, as a sweep that ran them all does. ``options.adopt_from`` names a
    published sweep (``adopt.adopt``) whose rows count as finished here: a sweep that goes on on another
    machine."""
    began = time.monotonic()
    options, loaded = options or SweepOptions(), loaded or Loaded()
    if options.parallel_runs < 1:
        raise ConfigError(f"parallel_runs must be at least 1, got {options.parallel_runs}")
    base = shared_api_base(base)
    lms = loaded.lm if loaded.lm is not None else load_replicas(base, report)
    replicas = Replicas(lms if isinstance(lms, list | tuple) else [lms])
    sweep_dir = sweep_dir or sweep_dir_for(base.runs_dir, base.dataset, base.lm, base.corpus)
    adopt_from = options.adopt_from
    if adopt_from is not None:
        report(f"adopted {adopt(adopt_from, sweep_dir, base.runs_dir)} finished rows from {adopt_from}")
    deadline = None if options.stop_after is None else began + options.stop_after
    sitting = open_sitting(grid, base, options, replace(loaded, lm=replicas.lms[0]), sweep_dir, report,
                           deadline=deadline)  # fmt: skip
    sitting.stopper.stop_at(began, options.stop_after)
    with sitting.lock:  # the parent run's, let go once it has ended
        try:
            _Runs(sitting, replicas).run_all()
            result = conclude(sitting, _oracle(sitting))
        except BaseException as exc:
            tracking.end_run(base.runs_dir, sitting.parent, status="KILLED" if interrupted(exc) else "FAILED")
            raise
        finally:
            sitting.stopper.cancel()
        tracking.end_run(base.runs_dir, sitting.parent)  # failed configurations are in its metrics, retried on rerun
    return result


class _Runs:
    """The planned configurations of a sitting run, ``parallel_runs`` at once, each on the least busy replica."""

    def __init__(self, sitting: Sitting, replicas: Replicas):
        s = sitting
        self.sitting, self.replicas = s, replicas
        self.todo = run_order(s.planned)
        self.keys = {p.point: p.key for p in s.planned}  # what a configuration carries from is found by its point
        self.compiles = Compiles(
            s.grid, s.base, (s.options.docs_per_demo, s.options.teacher), (s.got.train, s.got.retriever),
            (s.got.sweep_dir / COMPILED, s.fingerprint), s.shared,
        )  # fmt: skip
        self.compiles.expect(self.todo)

    def run_all(self) -> None:
        """Run every configuration of the plan; a configuration's failure is reported in it, what comes out of one
        (Ctrl-C, SIGTERM) cancels those not started and ends those running, then stops the sweep."""
        s = self.sitting
        pool = ThreadPoolExecutor(max_workers=s.options.parallel_runs, thread_name_prefix="ragscale-sweep")
        try:
            futures = [pool.submit(self.run_one, number, item) for number, item in enumerate(self.todo, start=1)]
            for future in as_completed(futures):
                future.result()
        except BaseException as exc:
            s.stopper.reason = exc
            s.report(
                f"stopping ({type(exc).__name__}): the running configurations end within a second while they answer "
                "questions, else when their LM calls in flight return; their finished questions are kept"
            )
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        in_plan = {item.key: i for i, item in enumerate(self.todo)}
        s.ran.sort(key=in_plan.__getitem__)  # in the plan's order, not the order they finished in
        s.failed.sort(key=in_plan.__getitem__)

    def run_one(self, number: int, item: PlannedPoint) -> None:
        """Run the configuration ``item``, the ``number``-th of the plan, unless the time limit passed or its new
        estimate skips it. One that fails on a replica (it raised, or too many of its questions failed:
        ``RunFailedError``) is tried once more on another, where its finished questions are resumed, before it
        counts as failed."""
        s, name = self.sitting, f"[{number}/{len(self.todo)}] {item.point.label}"
        if s.stopper.time_up():
            with s.shared:
                s.report(f"{name}: not started, the time limit passed")
                s.stopped.append(item.key)
            return
        with self.replicas.take() as index, s.stopper.stoppable():
            if not self._begin(name, item, index):
                return
            done = self._run(name, item, index)
        if isinstance(done, Exception) and len(self.replicas.lms) > 1:
            with self.replicas.take(besides=index) as other, s.stopper.stoppable():
                with s.shared:
                    s.report(f"{name}: failed on {self.replicas.name(index)}: {type(done).__name__}: {done}; "
                             f"trying it again on {self.replicas.name(other)}")  # fmt: skip
                index, done = other, self._run(name, item, other)
        if isinstance(done, Exception):
            with s.shared:
                s.report(f"{name}: failed{self._on(index)}: {type(done).__name__}: {done}")
                s.failed.append(item.key)
        elif done is not None:
            self._record(name, item, *done, replica=index)

    def _on(self, index: int) -> str:
        """`` on <replica>`` where there are several, for a configuration's lines."""
        return f" on {self.replicas.name(index)}" if len(self.replicas.lms) > 1 else ""

    def _begin(self, name: str, item: PlannedPoint, index: int) -> bool:
        """Whether ``item`` runs: re-estimated with what the configurations of its method finished so far in this
        sweep taught, it is skipped when its status is no longer "run"."""
        s, point = self.sitting, item.point
        with s.shared:
            item.estimate, item.seconds = s.planner.estimate(point, item.docs_per_demo)
            s.report(f"{name}: estimated {item.estimate.tokens:,.0f} tokens/question ({item.estimate.basis})"
                     f"{self._on(index)}")  # fmt: skip
            self.compiles.begin(point)
            item.status = status_of(item.estimate, s.grid, s.window)
            if item.status != "run":
                s.report(f"{name}: skipped, {item.status}")
                self.compiles.skipped(point)
                return False
            self.compiles.will_run(point)
            return True

    def _run(self, name: str, item: PlannedPoint, index: int) -> tuple[dict[str, Any], str, list] | Exception | None:
        """Run ``item`` on replica ``index`` as a child run of the sweep's, its program the group's compiled one cut
        to its shots; its summary, its program's digest and the records it carried; the exception it failed with
        (``run_one`` tries it again or counts it failed); or None when it did not fit the window or was stopped."""
        replica = self.replicas.lms[index]
        s, point = self.sitting, item.point
        # no DSPy autolog: it configures DSPy for the process, which a worker thread may not, and runs run side by side
        config = replace(self.compiles.config(point), run_name=f"{s.got.sweep_dir.name}-{file_label(point.label)}",
                         autolog=False)  # fmt: skip
        try:
            program = None
            if point.shots:
                program = demonstrations(self.compiles.program(point, replica), point, config)
            digest = program_digest(program)
            with s.shared:
                finished = {**s.got.tracked, **s.got.ledger}
            source, carry = carried(point, self.keys, finished, s.base.runs_dir, program=digest)
            if source is not None:
                item.seconds *= 1 - len(carry) / max(len(s.got.evalset), 1)  # as the plan: carried questions take none
                with s.shared:
                    s.report(f"{name}: carries {len(carry)} of {len(s.got.evalset)} questions from {source.label}, "
                             f"whose loop stopped before its cap of {source.iterations}")  # fmt: skip
            summary = run_experiment(
                config, lm=replica, retriever=s.got.retriever, corpus=s.got.corpus,
                examples=(s.got.train, s.got.evalset), parent_run_id=s.parent,
                progress=s.options.progress and s.options.parallel_runs == 1, check_context=True, compiled=program,
                carried=carry,
            )  # fmt: skip
        except ContextWindowError as exc:
            with s.shared:
                s.report(f"{name}: skipped, does not fit: {exc}")
                s.failed.append(item.key)
            return None
        except Stopped as exc:  # the sweep stopped: its run is KILLED, its finished questions kept for a rerun
            with s.shared:
                s.report(f"{name}: ended, {exc}; its finished questions kept for a rerun")
                s.stopped.append(item.key)
            return None
        except Exception as exc:  # one configuration failing does not stop the sweep; a rerun retries it
            if disk_error(exc) is not None:  # but a full or read-only disk fails every one: it stops the sweep
                raise
            log.exception("configuration %s failed on %s", point.label, self.replicas.name(index))
            return exc
        return summary, digest, carry

    def _record(
        self, name: str, item: PlannedPoint, summary: dict[str, Any], digest: str, carry: list, *, replica: int
    ) -> None:
        """Tag ``item``'s run with its key, its estimate and the server that ran it (replica ``replica``), teach the
        planner its records, and keep it in the ledger."""
        s, url = self.sitting, self.replicas.url(replica)
        run_id, estimate = summary["mlflow_run_id"], estimate_fields(item.estimate)
        records = run_records(s.base.runs_dir, run_id)
        with s.shared:
            mlflow_client = tracking.client(s.base.runs_dir)
            mlflow_client.set_tag(run_id, SWEEP_KEY_TAG, item.key)
            mlflow_client.set_tag(run_id, ESTIMATE_TAG, json.dumps(estimate))
            if url is not None:
                mlflow_client.set_tag(run_id, REPLICA_TAG, url)
            s.planner.learn(item.point, item.docs_per_demo, records)
            s.got.ledger[item.key] = ledger_row(
                run_id, s.base.lm, summary, estimate, program=digest, carried=len(carry), replica=url
            )
            save_ledger(s.got.sweep_dir, s.got.ledger)
            s.ran.append(item.key)
            s.report(
                f"{name}: EM {summary['em']:.1f} F1 {summary['f1']:.1f} Acc {summary['acc']:.1f}; "
                f"{summary[EFFECTIVE_CONTEXT]:,.0f} tokens/question measured; {summary['wall_s']:.0f} s"
                f"{self._on(replica)}"
            )


def _oracle(sitting: Sitting) -> list[Row]:
    """The oracle rows (``oracle_rows``), unless the grid has no baselines or the time limit passed; those that did
    not finish count as stopped at the time limit, else as failed."""
    s = sitting
    if not s.grid.baselines:
        return []
    if s.stopper.time_up():
        s.report("the oracle rows: not run, the time limit passed")
        return []
    with s.stopper.stoppable():
        oracle, oracle_failed = oracle_rows(
            s.base, s.got, s.grid, s.parent, progress=s.options.progress, report=s.report
        )
    (s.stopped if s.stopper.time_up() else s.failed).extend(oracle_failed)
    return oracle


def plan_only(
    grid: Grid, base: RunConfig, options: SweepOptions | None = None, loaded: Loaded | None = None, *,
    report: Callable[[str], None] = log.info,
) -> list[PlannedPoint]:  # fmt: skip
    """The plan alone: loads the LM (of several servers, the first one's) for its tokenizer and, without earlier
    runs, two tiny timed calls, and the data, but what ``loaded`` gives; builds no persistent index
    (``load_setup(index=False)``), compiles nothing, opens no MLflow run."""
    start = time.perf_counter()
    options, loaded = options or SweepOptions(), loaded or Loaded()
    base = shared_api_base(base)
    lm = loaded.lm if loaded.lm is not None else load_replicas(base, report)[0]  # built without a request
    load_s = time.perf_counter() - start
    sweep_dir = sweep_dir_for(base.runs_dir, base.dataset, base.lm, base.corpus)
    got = load_setup(grid, base, sweep_dir, replace(loaded, lm=lm), index=False)
    planner = Planner.for_run(base, lm, got.train, got.evalset, retriever=got.retriever, speed=got.speed)
    planned = plan(
        grid, base, lm=lm, train=got.train, evalset=got.evalset, ledger=got.ledger, speed=got.speed,
        docs_per_demo=options.docs_per_demo, teacher=options.teacher, tracked=got.tracked, retriever=got.retriever,
        planner=planner,
    )  # fmt: skip
    oracle = f"\n{ORACLE_NOTE}" if grid.baselines else ""
    report(format_plan(planned, planner.speed, len(got.evalset)) + oracle + f"\n(model loaded in {load_s:.0f} s)")
    return planned
