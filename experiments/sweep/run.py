"""Running a sweep: plan it, run what is not done yet as MLflow child runs, and report what it found.

One concept in one file: a sweep's run, from its set-up to its stored results.

Shots are demonstrations learned by the teleprompter, compiled once per method and shot count (with the largest
document count of the grid, and IterDRAG's largest iteration count) and reused across document and iteration
counts (``run_experiment(compiled=...)``, demos cut to the configuration's k documents each, as DRAG's
demonstrations carry as many documents as the test question). Each configuration is re-estimated just before it
runs, with what the ones finished by then taught, and keeps that estimate with its result. IterDRAG under a larger
iteration cap carries the questions whose loop stopped before a finished smaller cap (``carry.py``): they would be
asked the same way. A configuration that fails does not stop the sweep; a rerun retries it and skips the finished
ones. The configurations run cheapest first by their estimate, whatever their method, so a sweep stopped by its
time limit has filled the small budgets. ``plan_only`` prints the plan without running, ``allocate`` reads the
stored allocation model.

Several configurations may run at once (``parallel_runs``), each on one of the LM's servers: ``api_base`` may name
several replicas of one model, comma-separated. Each configuration takes the least busy replica when it starts, and
carries the whole list, sorted, as its ``api_base``: the replicas are one server, so a configuration's key (which
names ``api_base``) does not depend on the replica that answered it, and a rerun given the same URLs, in any order,
skips the finished configurations. One URL is kept as given, so single-server keys are what they were; adding or
removing a replica changes every key. Ctrl-C or SIGTERM cancels the configurations not started and ends those
running at their next LM or module call, each KILLED with its finished questions kept, as a run stopped alone is.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from dspy.utils.callback import BaseCallback

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.files import write_json
from ragscale.experiments.identity import config_key, data_fingerprint
from ragscale.experiments.inputs import corpus_for
from ragscale.experiments.parts import (
    build_program_for,
    build_retriever_for,
    compile_for,
    load_examples,
    load_lm_for,
    load_teacher_for,
    teaches_itself,
)
from ragscale.experiments.runner import run_experiment
from ragscale.experiments.signals import Stopped, interrupted
from ragscale.experiments.sweep import allocation, scores
from ragscale.experiments.sweep.carry import carried, program_digest
from ragscale.experiments.sweep.claims import check_claims, format_claims
from ragscale.experiments.sweep.estimate import Planner, estimate_fields
from ragscale.experiments.sweep.grid import Grid, Point, file_label, format_size, point_config
from ragscale.experiments.sweep.heldout import HeldOut
from ragscale.experiments.sweep.ledger import (
    ALLOCATION,
    COMPILED,
    ESTIMATE_TAG,
    LEDGER,
    RESULTS,
    SCORES,
    SWEEP_KEY_TAG,
    ledger_row,
    load_ledger,
    mlflow_rows,
    run_records,
    save_ledger,
    sweep_dir_for,
)
from ragscale.experiments.sweep.plan import PlannedPoint, format_plan, plan, run_order, status_of
from ragscale.experiments.sweep.report import (
    budget_table,
    fit_allocation,
    format_allocation,
    format_grid,
    format_table,
    plot,
)
from ragscale.experiments.sweep.rows import Row
from ragscale.experiments.sweep.speed import Speed, measure_speed, speed_from_runs
from ragscale.programs import method_named

log = logging.getLogger(__name__)

TABLE = "table.md"
PLOT = "accuracy_vs_context.png"
PLAN = "plan.md"


@dataclass
class SweepResult:
    sweep_dir: Path
    parent_run_id: str | None
    ran: list[str]
    skipped: list[str]
    failed: list[str]
    rows: list[Row]
    table: list[dict]
    allocation: dict | None
    plot_path: Path | None
    plan: list[PlannedPoint]
    oracle: list[Row] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # keys not run, or ended, at the time limit: a rerun runs them


@dataclass
class _Setup:
    """What planning and running share: the LM, the questions, the retriever the estimates search with, what is
    finished (the ledger and the sweep-tagged MLflow runs) and the LM's speed."""

    lm: Any
    train: list
    evalset: list
    retriever: Any
    ledger: dict[str, dict]
    tracked: dict[str, dict]
    speed: Speed


def server_urls(api_base: str | None) -> list[str]:
    """The URLs of a comma-separated ``api_base``, sorted, each once."""
    return sorted({url.strip() for url in (api_base or "").split(",") if url.strip()})


def shared_api_base(base: RunConfig) -> RunConfig:
    """``base`` with the ``api_base`` every configuration carries and is keyed by: one URL as given, several sorted
    and joined by commas (see the module docstring). Several URLs need a server LM (``openai/<model>``)."""
    urls = server_urls(base.api_base)
    if len(urls) <= 1:
        return base
    if not base.lm.startswith("openai/"):
        raise ConfigError(
            f"--api-base names {len(urls)} servers ({', '.join(urls)}) but --lm {base.lm!r} is a local model; "
            "several servers are replicas of an openai/<model> --lm"
        )
    return replace(base, api_base=",".join(urls))


def load_replicas(base: RunConfig) -> list:
    """One LM per server of ``base.api_base``, each loaded once; the one LM of ``base`` when it names one server or
    none (a local model)."""
    urls = server_urls(base.api_base)
    if len(urls) <= 1:
        return [load_lm_for(base)]
    return [load_lm_for(replace(base, api_base=url)) for url in urls]


class _Replicas:
    """The LMs the configurations are spread over: a run takes the one with the fewest runs on it (the first of
    those), and gives it back when it ends."""

    def __init__(self, lms: Sequence):
        self.lms, self.busy, self._lock = list(lms), [0] * len(lms), threading.Lock()

    def name(self, index: int) -> str:
        api_base = getattr(self.lms[index], "kwargs", {}).get("api_base")
        return api_base or f"LM {index + 1} of {len(self.lms)}"

    @contextmanager
    def take(self) -> Iterator[int]:
        with self._lock:
            index = min(range(len(self.lms)), key=self.busy.__getitem__)
            self.busy[index] += 1
        try:
            yield index
        finally:
            with self._lock:
                self.busy[index] -= 1


class TimeLimitError(Exception):
    """The sweep's time limit (``stop_after``) passed: the configurations running end, those not started do not
    start, and the sweep reports what finished."""


class _Stopper(BaseCallback):
    """A DSPy callback that ends the sweep's runs in flight once the sweep is stopped: their next module or LM call
    raises what stopped it (a copy of the Ctrl-C or SIGTERM, else ``Stopped`` saying why: the time limit, or an error
    that stopped the sweep), so each run ends KILLED with what it finished kept, as a run stopped alone does. It rides
    in ``dspy.context``, so it reaches the threads that answer a run's questions. What it raises is a
    ``BaseException``: DSPy logs and drops an ``Exception`` raised by a callback."""

    def __init__(self):
        super().__init__()
        self.reason: BaseException | None = None

    def _check(self) -> None:
        reason = self.reason
        if reason is not None:
            if interrupted(reason):
                raise type(reason)(*reason.args)
            if isinstance(reason, TimeLimitError):
                raise Stopped(str(reason))
            raise Stopped(f"the sweep stopped: {type(reason).__name__}: {reason}")

    def on_module_start(self, call_id, instance, inputs) -> None:
        self._check()

    def on_lm_start(self, call_id, instance, inputs) -> None:
        self._check()


def _setup(
    grid: Grid,
    base: RunConfig,
    sweep_dir: Path,
    *,
    lm=None,
    examples: tuple[Sequence, Sequence] | None = None,
    retriever=None,
    speed: Speed | None = None,
    index: bool = True,
    progress: bool = False,
) -> _Setup:
    """Load what a sweep needs. ``index`` builds the configured retriever (cached under ``<runs_dir>/indexes``) so
    that the estimates count the documents it really retrieves; without it (a plan alone) an in-memory BM25 over the
    same corpus stands in, which builds in seconds."""
    if lm is None:
        lm = load_lm_for(base)
    train, evalset = load_examples(base, examples)
    if retriever is None and any(method_named(m).retrieves for m in grid.methods):
        if index:
            retriever = build_retriever_for(base, train, evalset, progress=progress)
        else:
            from ragscale.programs.retrieval import BM25Retriever

            corpus = corpus_for(base, train, evalset)
            retriever = BM25Retriever(corpus.passages, key=corpus.key)
            retriever.corpus = corpus.describe()
    ledger = load_ledger(sweep_dir)
    tracked = mlflow_rows(base.runs_dir)
    if speed is None:
        speed = speed_from_runs({**tracked, **ledger}.values(), base.lm)
    if speed is None:
        speed = measure_speed(
            lm, next((p["text"] for ex in evalset for p in (getattr(ex, "paragraphs", None) or [])), "")
        )
    return _Setup(lm, train, evalset, retriever, ledger, tracked, speed)


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
    from ragscale.optimizers.demos import cap_demos, redraw_demo_documents

    program = copy.deepcopy(compiled)
    if method_named(point.method).iterates:
        redraw_demo_documents(program, config.docs)
    return cap_demos(program, point.shots, config.docs_per_demo)


def _compile(
    base: RunConfig, point: Point, grid: Grid, *, lm, retriever, train: Sequence, docs_per_demo: int | None,
    teacher: str | None = None, load_teacher: Callable[[RunConfig], Any] = load_teacher_for,
    keep_in: Path | None = None, fingerprint: str = "",
):  # fmt: skip
    """Compile ``point.method`` with ``point.shots`` demos once, at ``compile_point``, by the point's teleprompter
    (``grid.optimizer_of``), its teacher program on ``load_teacher(config)`` when the point's config has a teacher
    (``teacher`` for a teleprompter that runs one). A program an earlier sitting compiled with the same settings and
    data, kept as JSON in the folder ``keep_in`` (``compiled_path``), is loaded instead: the same demonstrations in
    every sitting, on every machine that adopts the sweep, and no teacher run again; one compiled now is kept
    there."""
    import dspy

    from ragscale.programs.lm import make_adapter

    at = compile_point(point, grid)
    config = point_config(base, at, docs_per_demo=docs_per_demo, teacher=teacher)
    adapter = make_adapter(base.adapter)
    saved = None if keep_in is None else compiled_path(keep_in, config, fingerprint)
    with dspy.context(lm=lm, adapter=adapter):
        if saved is not None and saved.exists():
            program = build_program_for(config, retriever)
            program.load(str(saved))
            return program
        teacher_lm = None if config.teacher is None else lm if teaches_itself(config) else load_teacher(config)
        program = compile_for(config, build_program_for(config, retriever), train, lm, adapter, teacher_lm=teacher_lm)
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        program.save(str(saved))
    return program


def compiled_path(folder: Path, config: RunConfig, fingerprint: str) -> Path:
    """Where a sweep keeps the program it compiled with ``config`` on the data of ``fingerprint``: named by its
    method, shots and key, so that a program compiled with other settings or data is never loaded."""
    return Path(folder) / f"{config.method}-m{config.shots}-{config_key(config, fingerprint)}.json"


ORACLE_NOTE = (
    "then two oracle rows (the RAG program given each question's gold paragraphs, then them padded to the grid's "
    "largest documents count with retrieved distractors): not estimated"
)
ORACLE_K = 20  # the gold paragraphs whatever k asks; k is as large as MuSiQue's 20, for the prompt's length check


def _oracle_rows(
    base: RunConfig, got: _Setup, grid: Grid, *, parent: str, sweep_dir: Path, fingerprint: str, progress: bool,
    report
) -> tuple[list[Row], list[str]]:  # fmt: skip
    """The RAG program given each question's gold paragraphs, then given them padded to the grid's largest
    documents count with the passages the retriever ranks highest that are not gold (``OracleRetriever``): the
    reader's bound without retrieval errors, and that bound among as many passages as the longest configuration
    reads, beside the grid. Run once, kept in the ledger under their keys like a configuration, and left out of the
    budget table and the allocation model (no retriever can do what they do). Returns their rows and the keys that
    failed."""
    from ragscale.experiments.oracle import OracleRetriever

    if not all(getattr(ex, "paragraphs", None) for ex in got.evalset):
        report("no oracle rows: some questions carry no paragraphs")
        return [], []
    rows, failed = [], []
    widest = max(grid.docs, default=0)
    for distractors in (None, got.retriever) if got.retriever is not None and widest else (None,):
        retriever = OracleRetriever(got.evalset, gold_only=True, distractors=distractors)
        name = retriever.identity
        config = replace(
            base, method="rag", docs=ORACLE_K if distractors is None else widest, shots=0, optimizer="none",
            run_name=f"{sweep_dir.name}-{name}",
        )  # fmt: skip
        key = config_key(config, fingerprint, retriever=retriever)
        found = got.ledger.get(key) or got.tracked.get(key)
        if found is None:
            given = "the gold paragraphs" if distractors is None else f"the gold paragraphs among {widest} passages"
            report(f"[oracle] {name}: the RAG program given {given}")
            try:
                summary = run_experiment(
                    config, lm=got.lm, retriever=retriever, examples=(got.train, got.evalset), parent_run_id=parent,
                    progress=progress, check_context=True,
                )  # fmt: skip
            except Stopped as exc:  # the time limit, or the sweep stopped: the caller counts it stopped
                report(f"  ended, {exc}")
                failed.append(key)
                break
            except Exception as exc:  # like a configuration: reported, retried by a rerun, the sweep goes on
                log.exception("oracle row %s failed", name)
                report(f"  failed: {type(exc).__name__}: {exc}")
                failed.append(key)
                continue
            tracking.client(base.runs_dir).set_tag(summary["mlflow_run_id"], SWEEP_KEY_TAG, key)
            found = got.ledger[key] = ledger_row(summary["mlflow_run_id"], base.lm, summary, {})
            save_ledger(sweep_dir, got.ledger)
            report(f"  EM {summary['em']:.1f}; {summary[EFFECTIVE_CONTEXT]:,.0f} tokens/question")
        settings = {"method": name, "docs": 0 if distractors is None else widest, "shots": 0, "iterations": 0}
        rows.append(Row.from_json({**found, **settings, "key": key, "lm": base.lm}))
    return rows, failed


def run_sweep(
    grid: Grid,
    base: RunConfig,
    *,
    lm=None,
    retriever=None,
    examples: tuple[Sequence, Sequence] | None = None,
    sweep_dir: Path | None = None,
    docs_per_demo: int | None = None,
    teacher: str | None = None,
    speed: Speed | None = None,
    parallel_runs: int = 1,
    stop_after: float | None = None,
    adopt_from: Path | None = None,
    progress: bool = True,
    report: Callable[[str], None] = log.info,
) -> SweepResult:
    """Plan, run what is not done yet, and summarise; see the module docstring. ``report`` receives the plan, the
    table and the allocation summary as text (the CLI prints them), and a configuration's lines each begin with its
    number and label, as those of runs at once interleave.

    ``parallel_runs`` configurations run at once, in threads, spread over ``lm``: an LM or a list of them, one per
    replica (default: one per URL of ``base.api_base``, loaded once each; see ``load_replicas``). Every configuration
    carries ``base.api_base`` whole, sorted (``shared_api_base``), whichever replica served it, so its key is the
    same on a rerun given the same URLs in any order. Runs at once on a local model share its one engine, which
    batches their requests. Each run's progress bar is drawn only when one runs at a time. The oracle rows run after
    the grid, one after the other, on the first LM. ``teacher`` (an LM name) runs the teacher programs of the
    compiles that have one (``grid.optimizer_of``); it is loaded by the first and released after the last, its memory
    left to the student's decode graphs.

    ``stop_after`` seconds after it starts, the sweep stops (``TimeLimitError``): the configurations running end at
    their next LM or module call (their finished questions kept: a rerun resumes them), those not started are left,
    and it reports and plots what finished, as a sweep that ran them all does. ``adopt_from`` names a published
    sweep (``published.adopt``) whose rows count as finished here: a sweep that goes on on another machine."""
    import dspy

    from ragscale.optimizers.context import ContextWindowError
    from ragscale.programs.lm import context_window, release_lm

    began = time.monotonic()
    if parallel_runs < 1:
        raise ConfigError(f"parallel_runs must be at least 1, got {parallel_runs}")
    base = shared_api_base(base)
    if lm is None:
        lm = load_replicas(base)
    replicas = _Replicas(lm if isinstance(lm, list | tuple) else [lm])
    sweep_dir = sweep_dir or sweep_dir_for(base.runs_dir, base.dataset, base.lm, base.corpus)
    if adopt_from is not None:
        from ragscale.experiments.sweep.published import adopt

        report(f"adopted {adopt(adopt_from, sweep_dir, base.runs_dir)} finished rows from {adopt_from}")
    got = _setup(
        grid, base, sweep_dir, lm=replicas.lms[0], examples=examples, retriever=retriever, speed=speed,
        progress=progress,
    )  # fmt: skip
    lm, train, evalset, ledger, tracked = got.lm, got.train, got.evalset, got.ledger, got.tracked
    planner = Planner.for_run(base, lm, train, evalset, retriever=got.retriever, speed=got.speed)
    planned = plan(
        grid, base, lm=lm, train=train, evalset=evalset, ledger=ledger, speed=got.speed, docs_per_demo=docs_per_demo,
        teacher=teacher,
        tracked=tracked, retriever=got.retriever, planner=planner,
    )  # fmt: skip
    report(format_plan(planned, planner.speed, len(evalset)) + (f"\n{ORACLE_NOTE}" if grid.baselines else ""))
    window = context_window(lm)
    if parallel_runs > 1 and not base.lm.startswith("openai/"):
        report(
            f"{parallel_runs} configurations at once share the local model's one engine, which batches their requests"
        )
    fingerprint = data_fingerprint(train, evalset)

    parent = tracking.start_run(
        base.runs_dir,
        run_name=f"sweep-{sweep_dir.name}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}",
        params={
            **{f"grid.{k}": ",".join(map(str, v)) if isinstance(v, tuple) else str(v) for k, v in asdict(grid).items()},
            **{f"base.{k}": v for k, v in base.to_params().items()},
            "data_fingerprint": fingerprint,
            "docs_per_demo": str(docs_per_demo),
            "teacher": str(teacher),
            "parallel_runs": str(parallel_runs),
        },
        tags={"dataset": base.dataset, "lm": base.lm},
        kind="sweep",
    )
    ran, failed = [], []
    # One lock for what the runs share: the ledger and its file, ran and failed, the planner, MLflow tags, report.
    shared = threading.Lock()
    compiled: dict[tuple[str, int], Any] = {}
    compiling: dict[tuple[str, int], threading.Lock] = {}  # one per (method, shots): each is compiled once
    stopper = _Stopper()
    todo = run_order(planned)
    keys = {p.point: p.key for p in planned}  # what a configuration carries from is found by its point
    stopped: list[str] = []
    timer = None
    if stop_after is not None:
        reason = TimeLimitError(f"the time limit of {stop_after:.0f} s passed")
        timer = threading.Timer(max(0.0, began + stop_after - time.monotonic()), setattr, (stopper, "reason", reason))
        timer.daemon = True
        timer.start()

    def time_up() -> bool:
        return isinstance(stopper.reason, TimeLimitError)

    def stoppable():  # the runs started in it end at their next call once the sweep is stopped
        return dspy.context(callbacks=[*dspy.settings.get("callbacks", []), stopper])

    teachers: list = []  # the teacher LM (--teacher), loaded by the first compile that runs a teacher program
    taught = {  # the compiles that run it; once each has been tried, it is released for the student's decode graphs
        (item.point.method, item.point.shots)
        for item in todo
        if item.point.shots and point_config(base, item.point, docs_per_demo=docs_per_demo, teacher=teacher).teacher
    }
    tried: set[tuple[str, int]] = set()
    unstarted = Counter((item.point.method, item.point.shots) for item in todo)  # of each group, points not begun

    def teacher_lm(config: RunConfig):
        with shared:
            if not teachers:
                teachers.append(load_teacher_for(config))
            return teachers[0]

    def compiled_for(point: Point, replica) -> Any:
        group = (point.method, point.shots)
        with shared:
            group_lock = compiling.setdefault(group, threading.Lock())
        with group_lock:
            if group not in compiled:
                try:
                    compiled[group] = _compile(
                        base, point, grid, lm=replica, retriever=got.retriever, train=train,
                        docs_per_demo=docs_per_demo, teacher=teacher, load_teacher=teacher_lm,
                        keep_in=sweep_dir / COMPILED, fingerprint=fingerprint,
                    )  # fmt: skip
                finally:  # a compile that failed is tried again by its group's next point, loading the teacher again
                    with shared:
                        done_with(group)
            return compiled[group]

    def done_with(group: tuple[str, int]) -> None:  # under `shared`: its compile was tried, or every point skipped
        tried.add(group)
        if teachers and taught <= tried:
            release_lm(teachers.pop())

    def run_one(number: int, item: PlannedPoint) -> None:
        point = item.point
        name = f"[{number}/{len(todo)}] {point.label}"
        config = point_config(base, point, docs_per_demo=docs_per_demo, teacher=teacher)
        # no DSPy autolog: it configures DSPy for the process, which a worker thread may not, and runs run side by side
        config = replace(config, run_name=f"{sweep_dir.name}-{file_label(point.label)}", autolog=False)
        if time_up():
            with shared:
                report(f"{name}: not started, the time limit passed")
                stopped.append(item.key)
            return
        with replicas.take() as index, stoppable():
            replica = replicas.lms[index]
            with shared:
                # Re-estimated with what the configurations of its method finished so far in this sweep taught.
                item.estimate, item.seconds = planner.estimate(point, item.docs_per_demo)
                on = f" on {replicas.name(index)}" if len(replicas.lms) > 1 else ""
                report(f"{name}: estimated {item.estimate.tokens:,.0f} tokens/question ({item.estimate.basis}){on}")
                group = (point.method, point.shots)
                unstarted[group] -= 1
                item.status = status_of(item.estimate, grid, window)
                if item.status != "run":  # the group's compile is left to a point of it that runs, if one does
                    report(f"{name}: skipped, {item.status}")
                    if not unstarted[group] and group not in compiling:
                        done_with(group)
                    return
                compiling.setdefault(group, threading.Lock())  # a point of it runs: its compile marks it tried
            try:
                program = None
                if point.shots:
                    program = demonstrations(compiled_for(point, replica), point, config)
                digest = program_digest(program)
                with shared:
                    finished = {**tracked, **ledger}
                source, carry = carried(point, keys, finished, base.runs_dir, program=digest)
                if source is not None:
                    item.seconds *= 1 - len(carry) / max(len(evalset), 1)  # as the plan: carried questions take none
                    with shared:
                        report(f"{name}: carries {len(carry)} of {len(evalset)} questions from {source.label}, "
                               f"whose loop stopped before its cap of {source.iterations}")  # fmt: skip
                summary = run_experiment(
                    config,
                    lm=replica,
                    retriever=got.retriever,
                    examples=(train, evalset),
                    parent_run_id=parent,
                    progress=progress and parallel_runs == 1,
                    check_context=True,
                    compiled=program,
                    carried=carry,
                )
            except ContextWindowError as exc:
                with shared:
                    report(f"{name}: skipped, does not fit: {exc}")
                    failed.append(item.key)
                return
            except Stopped as exc:  # the sweep stopped: its run is KILLED, its finished questions kept for a rerun
                with shared:
                    report(f"{name}: ended, {exc}; its finished questions kept for a rerun")
                    stopped.append(item.key)
                return
            except Exception as exc:  # one configuration failing does not stop the sweep; a rerun retries it
                log.exception("configuration %s failed", point.label)
                with shared:
                    report(f"{name}: failed: {type(exc).__name__}: {exc}")
                    failed.append(item.key)
                return
        run_id, estimate = summary["mlflow_run_id"], estimate_fields(item.estimate)
        records = run_records(base.runs_dir, run_id)
        with shared:
            mlflow_client = tracking.client(base.runs_dir)
            mlflow_client.set_tag(run_id, SWEEP_KEY_TAG, item.key)
            mlflow_client.set_tag(run_id, ESTIMATE_TAG, json.dumps(estimate))
            planner.learn(point, item.docs_per_demo, records)
            ledger[item.key] = ledger_row(run_id, base.lm, summary, estimate, program=digest, carried=len(carry))
            save_ledger(sweep_dir, ledger)
            ran.append(item.key)
            report(
                f"{name}: EM {summary['em']:.1f} F1 {summary['f1']:.1f} Acc {summary['acc']:.1f}; "
                f"{summary[EFFECTIVE_CONTEXT]:,.0f} tokens/question measured; {summary['wall_s']:.0f} s"
            )

    try:
        pool = ThreadPoolExecutor(max_workers=parallel_runs, thread_name_prefix="ragscale-sweep")
        try:
            futures = [pool.submit(run_one, number, item) for number, item in enumerate(todo, start=1)]
            for future in as_completed(futures):
                future.result()  # a configuration's failure is reported in it; what comes out stops the sweep
        except BaseException as exc:  # Ctrl-C, SIGTERM: cancel what has not started, end what runs, then stop
            stopper.reason = exc
            report(
                f"stopping ({type(exc).__name__}): the running configurations end when their LM calls in flight "
                "return (a long prompt's prefill can take minutes); their finished questions are kept"
            )
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        in_plan = {item.key: i for i, item in enumerate(todo)}
        ran.sort(key=in_plan.__getitem__)  # in the plan's order, not the order they finished in
        failed.sort(key=in_plan.__getitem__)
        oracle: list[Row] = []
        if grid.baselines and time_up():
            report("the oracle rows: not run, the time limit passed")
        elif grid.baselines:
            with stoppable():
                oracle, oracle_failed = _oracle_rows(
                    base, got, grid, parent=parent, sweep_dir=sweep_dir, fingerprint=fingerprint, progress=progress,
                    report=report,
                )  # fmt: skip
            (stopped if time_up() else failed).extend(oracle_failed)
        rows = []
        for item in planned:
            found = ledger.get(item.key) or tracked.get(item.key)
            if found is not None:
                row = {**item.row(), **found, "lm": base.lm}
                if "estimate_basis" not in found:  # ran before estimates were kept: this one was made after it ran
                    row["estimate_basis"] += ", made after it ran"
                rows.append(Row.from_json(row, source=f"{sweep_dir / LEDGER} {item.key}"))
        fitted = fit_allocation(rows, grid.budgets, base.dataset)
        claims: list[dict] = []
        per_question: dict[str, dict[str, float]] | None = None
        held_out = None
        try:
            per_question = scores.collect(base.runs_dir, [*rows, *oracle])
            held_out = HeldOut(lambda row: per_question.get(row.run_id), rows)
            claims = check_claims(rows, grid.budgets, fitted, per_question.get, oracle=oracle)
        except Exception as exc:  # the tables, the plot and the model are still written; the report says why not
            log.exception("the paper's claims were not checked")
            report(f"the paper's claims were not checked: {type(exc).__name__}: {exc}")
        table = budget_table(rows, grid.budgets, held_out)
        results = {
            "dataset": base.dataset,
            "lm": base.lm,
            "grid": asdict(grid),
            "rows": [r.to_json() for r in rows],
            "table": table,
            "oracle": [r.to_json() for r in oracle],
            "claims": claims,
        }
        write_json(sweep_dir / RESULTS, results)
        # The folder's files are of this sitting: one left from an earlier one would not match results.json.
        if per_question is None:
            (sweep_dir / SCORES).unlink(missing_ok=True)
        else:
            scores.save(sweep_dir, per_question)
        if fitted is None:
            (sweep_dir / ALLOCATION).unlink(missing_ok=True)
        best, every, checked = format_table(table), format_grid(rows), format_claims(claims, len(evalset))
        (sweep_dir / TABLE).write_text("\n\n".join([best, every, checked]) + "\n", encoding="utf-8")
        (sweep_dir / PLAN).write_text(format_plan(planned, planner.speed, len(evalset)) + "\n", encoding="utf-8")
        artifacts = [sweep_dir / RESULTS, sweep_dir / TABLE, sweep_dir / PLAN]
        if per_question is not None:
            artifacts.append(sweep_dir / SCORES)
        plot_path = None
        if rows:
            title = f"{base.dataset}, {base.lm}, {len(evalset)} q"
            plot_path = plot(rows, grid.budgets, sweep_dir / PLOT, title=title, oracle=oracle)
            artifacts.append(plot_path)
        if fitted is not None:
            allocation.save(sweep_dir / ALLOCATION, fitted)
            artifacts.append(sweep_dir / ALLOCATION)
        report(best)
        report(every)
        if fitted is not None:
            report(format_allocation(fitted))
        report(checked)
        metrics: dict[str, float | None] = {"configurations_run": len(ran), "configurations_failed": len(failed)}
        for r in table:
            for score in ("acc", "em", "f1"):
                metrics[f"{score}_{r['method']}_{format_size(r['budget'])}"] = r[score]
        if fitted is not None:
            metrics["allocation_r2"] = fitted["model"]["r2"]
            metrics["allocation_mse"] = fitted["model"]["mse"]
        tracking.log_metrics(base.runs_dir, parent, metrics)
        tracking.log_artifacts(base.runs_dir, parent, artifacts)
    except BaseException as exc:
        tracking.end_run(base.runs_dir, parent, status="KILLED" if interrupted(exc) else "FAILED")
        raise
    finally:
        if timer is not None:
            timer.cancel()
    tracking.end_run(base.runs_dir, parent)  # failed configurations are counted in its metrics and retried on rerun
    skipped = [p.key for p in planned if p.status != "run"]
    return SweepResult(
        sweep_dir, parent, ran, skipped, failed, rows, table, fitted, plot_path, planned, oracle, claims, stopped
    )


def plan_only(
    grid: Grid, base: RunConfig, *, lm=None, docs_per_demo: int | None = None, teacher: str | None = None,
    report: Callable[[str], None] = log.info,
) -> list[PlannedPoint]:  # fmt: skip
    """The plan alone: loads the LM (of several servers, the first one's) for its tokenizer and, without earlier
    runs, two tiny timed calls, and the data; builds no persistent index (``_setup(index=False)``), compiles nothing,
    opens no MLflow run."""
    start = time.perf_counter()
    base = shared_api_base(base)
    if lm is None:
        lm = load_replicas(base)[0]  # a server LM is built without a request
    load_s = time.perf_counter() - start
    sweep_dir = sweep_dir_for(base.runs_dir, base.dataset, base.lm, base.corpus)
    got = _setup(grid, base, sweep_dir, lm=lm, index=False)
    planner = Planner.for_run(base, lm, got.train, got.evalset, retriever=got.retriever, speed=got.speed)
    planned = plan(
        grid, base, lm=lm, train=got.train, evalset=got.evalset, ledger=got.ledger, speed=got.speed,
        docs_per_demo=docs_per_demo, teacher=teacher, tracked=got.tracked, retriever=got.retriever, planner=planner,
    )  # fmt: skip
    oracle = f"\n{ORACLE_NOTE}" if grid.baselines else ""
    report(format_plan(planned, planner.speed, len(got.evalset)) + oracle + f"\n(model loaded in {load_s:.0f} s)")
    return planned


def allocate(sweep_dir: Path, budget: int) -> dict[str, Any]:
    """The configuration the stored model predicts best within ``budget`` (among the sweep's configurations)."""
    path = sweep_dir / ALLOCATION
    try:
        fitted = allocation.load(path)
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from exc
    model = allocation.AllocationModel.from_json(fitted["model"])
    i = fitted["informativeness"]
    candidates = [Row.from_json(c, source=str(path)) for c in fitted["candidates"]]
    best = allocation.predict_best(model, candidates, budget, i)
    if best is None:
        smallest = min(c.effective_context() for c in candidates)
        raise ConfigError(f"no configuration of the sweep fits {budget} tokens (the smallest needs {smallest:,.0f})")
    return {
        "budget": budget,
        "method": best.method,
        "docs": best.docs,
        "shots": best.shots,
        "iterations": best.iterations,
        EFFECTIVE_CONTEXT: best.effective_context(),
        "predicted_acc": round(100 * model.predict(best.docs, best.shots, best.iterations, i), 2),
        "measured_acc": best.acc,
        "r2": model.r2,
    }
