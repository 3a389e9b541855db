"""``ragscale sweep``: the inference-scaling budget sweep; ``ragscale allocate``: its pick for a budget."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from ragscale.data.corpora import corpus_name
from ragscale.experiments import resume
from ragscale.experiments.cli.flags import add_flag, flags
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.files import write_json
from ragscale.experiments.inputs import check_inputs, check_output_file
from ragscale.experiments.sweep.adopt import manifest_of
from ragscale.experiments.sweep.allocation import allocate
from ragscale.experiments.sweep.grid import (
    CHAIN_OPTIMIZER,
    DEFAULT_BUDGETS,
    DEFAULT_DOCS,
    DEFAULT_ITERATIONS,
    DEFAULT_LIMIT,
    DEFAULT_SHOTS,
    METHODS,
    Grid,
    format_size,
    grid_points,
    parse_ints,
    parse_size,
    point_config,
)
from ragscale.experiments.sweep.ledger import sweep_dir_for
from ragscale.experiments.sweep.replicas import shared_api_base
from ragscale.experiments.sweep.run import plan_only, run_sweep
from ragscale.experiments.sweep.setup import Loaded
from ragscale.experiments.sweep.sitting import SweepOptions
from ragscale.experiments.sweep.stopping import TimeLimitError
from ragscale.programs import method_named


def add_sweep(subparsers) -> None:
    sweep = subparsers.add_parser(
        "sweep",
        help="budget sweep over documents, shots and iterations: table, plot and allocation model",
        description="Defaults are a small grid for a 2-core CPU; the paper's grid is "
        "--docs 1,2,5,10,20 --shots 0,1,2,4,8 --iterations 1,2,3 --budgets 2k,4k,8k,16k (for a GPU or a server).",
    )
    known = flags()
    add_flag(sweep, "--dataset", known=known, required=True)
    sweep.add_argument("--methods", default=",".join(METHODS), help="comma-separated: " + ",".join(METHODS))
    sweep.add_argument("--docs", default=",".join(map(str, DEFAULT_DOCS)), help="documents k per question")
    sweep.add_argument("--shots", default=",".join(map(str, DEFAULT_SHOTS)), help="demonstrations m (learned)")
    sweep.add_argument("--iterations", default=",".join(map(str, DEFAULT_ITERATIONS)), help="IterDRAG steps n")
    sweep.add_argument(
        "--budgets", default=",".join(map(format_size, DEFAULT_BUDGETS)),
        help="effective-context budgets, positive token counts, e.g. 2k,4k",
    )  # fmt: skip
    add_flag(sweep, "--lm", known=known, defaults=True)
    add_flag(
        sweep, "--api-base", known=known,
        help="URL of an OpenAI-compatible server; several, comma-separated, are replicas of one openai/<model> --lm, "
        "each configuration running on the least busy; one that does not answer at the start is left out with a "
        "warning, and a configuration that fails on one is tried once more on another. A configuration is keyed by "
        "the sorted list, not by its replica: a rerun given the same URLs, in any order, skips the finished ones",
    )  # fmt: skip
    sweep.add_argument(
        "--parallel-runs", dest="parallel_runs", type=int, default=1,
        help="configurations run at once (default: 1), spread over the --api-base servers; with a local --lm they "
        "share its one engine",
    )  # fmt: skip
    add_flag(sweep, "--adapter", known=known, defaults=True)
    add_flag(sweep, "--limit", known=known, default=DEFAULT_LIMIT, help=f"dev questions (default: {DEFAULT_LIMIT})")
    add_flag(sweep, "--train-limit", known=known, defaults=True)
    add_flag(
        sweep, "--optimizer", known=known, default="labeled",
        help="teleprompter for shots (default: labeled; IterDRAG's chains are bootstrapped whenever it is labeled)",
    )  # fmt: skip
    add_flag(sweep, "--teacher", known=known,
             help="runs the teacher program of the bootstrapped demonstrations, e.g. qwen2.5-coder-1.5b")  # fmt: skip
    add_flag(sweep, "--docs-per-demo", known=known, help="documents per demonstration (default: k, the paper's)")
    for name in ("--retriever", "--corpus", "--chroma-url", "--request-timeout", "--data-dir", "--runs-dir",
                 "--threads"):  # fmt: skip
        add_flag(sweep, name, known=known, defaults=True)
    add_sweep_flags(sweep)
    add_flag(sweep, "--no-progress", known=known)
    sweep.add_argument("--json", dest="json_path", type=Path, help="also write the table and the model as JSON")
    sweep.set_defaults(func=cmd_sweep)


def add_sweep_flags(sweep) -> None:
    """The flags of how a sweep runs that no other subcommand takes: its time limit, what it adopts, what it skips."""
    sweep.add_argument(
        "--stop-after", dest="stop_after", type=float, metavar="MINUTES",
        help="stop after this many minutes: what runs ends (a rerun resumes it), and what finished is reported",
    )  # fmt: skip
    sweep.add_argument(
        "--adopt", type=Path, metavar="FOLDER",
        help="a published sweep (benchmarks/publish.py --sweep) whose rows count as finished: go on where it stopped",
    )  # fmt: skip
    sweep.add_argument("--no-baselines", dest="baselines", action="store_false", help="no closed-book or oracle runs")
    sweep.add_argument(
        "--beyond-budget", dest="beyond_budget", action="store_true",
        help="run also the configurations whose learned estimate lies past the largest budget (skipped by default: "
        "no budget could choose them)",
    )  # fmt: skip
    sweep.add_argument("--plan-only", dest="plan_only", action="store_true", help="print the plan; run nothing")


def _grid_and_base(args) -> tuple[Grid, RunConfig]:
    budgets = tuple(sorted({parse_size(b, "--budgets") for b in args.budgets.split(",") if b.strip()}))
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    if not methods:
        raise ConfigError(f"--methods {args.methods!r} names no method; give one or more of {','.join(METHODS)}")
    grid = Grid(
        methods=methods,
        docs=parse_ints(args.docs, "docs", 1),
        shots=parse_ints(args.shots, "shots", 0),
        iterations=parse_ints(args.iterations, "iterations", 1),
        budgets=budgets,
        baselines=args.baselines,
        beyond_budget=args.beyond_budget,
    )
    base = RunConfig(
        method="rag",
        dataset=args.dataset,
        optimizer=args.optimizer,
        lm=args.lm,
        api_base=args.api_base,
        adapter=args.adapter,
        retriever=args.retriever,
        corpus=args.corpus,
        chroma_url=args.chroma_url,
        request_timeout=args.request_timeout,
        limit=args.limit,
        train_limit=args.train_limit,
        data_dir=args.data_dir,
        runs_dir=args.runs_dir,
        threads=args.threads,
    )
    return grid, base


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.parallel_runs < 1:
        raise ConfigError(f"--parallel-runs {args.parallel_runs}: must be at least 1 (configurations run at once)")
    grid, base = _grid_and_base(args)
    base = shared_api_base(base)  # several servers need an openai/<model> --lm: said before any is tried
    # the corpus must hold the grid's largest k, unless no method of the sweep retrieves
    retrieves = [method for method in grid.methods if method_named(method).retrieves]
    corpus = check_inputs(replace(base, method=(retrieves or grid.methods)[0], docs=max(grid.docs)))
    if args.teacher is not None:
        taught = [p for p in grid_points(grid) if point_config(base, p, teacher=args.teacher).teacher is not None]
        if not taught:
            raise ConfigError(
                f"--teacher {args.teacher}: no configuration of this sweep runs a teacher program (it teaches "
                f"IterDRAG's chains, or every method with --optimizer {CHAIN_OPTIMIZER})"
            )
        check_inputs(point_config(base, taught[0], teacher=args.teacher))
    if args.json_path is not None:
        check_output_file(args.json_path, "--json")
    resume.end_abandoned(base.runs_dir)  # before the plan reads the runs: one whose process died is KILLED
    if args.stop_after is not None and not args.stop_after > 0:
        raise ConfigError(f"--stop-after {args.stop_after}: must be a positive number of minutes")
    if args.adopt is not None:
        try:
            manifest_of(args.adopt)  # a published sweep's, read before any model loads
        except ConfigError as exc:
            raise ConfigError(f"--adopt: {exc}") from exc
    options = SweepOptions(
        docs_per_demo=args.docs_per_demo,
        teacher=args.teacher,
        parallel_runs=args.parallel_runs,
        stop_after=None if args.stop_after is None else 60 * args.stop_after,
        adopt_from=args.adopt,
        progress=args.progress,
    )
    if args.plan_only:
        plan_only(grid, base, options, Loaded(corpus=corpus), report=print)
        return 0
    start = time.perf_counter()
    try:
        result = run_sweep(grid, base, options, Loaded(corpus=corpus), report=print)
    except TimeLimitError as exc:  # before any configuration started: nothing ran, nothing to report
        print(f"ragscale sweep: stopped: {exc}; no configuration ran", file=sys.stderr)
        return 1
    print(
        f"\nsweep: {len(result.ran)} ran, {len(result.skipped)} skipped (done, over budget or window), "
        f"{len(result.failed)} failed, {len(result.stopped)} left at the time limit in "
        f"{time.perf_counter() - start:.0f} s; files in {result.sweep_dir}; parent run {result.parent_run_id}"
    )
    if args.json_path is not None:
        write_json(
            args.json_path,
            {
                "table": result.table,
                "rows": [row.to_json() for row in result.rows],
                "oracle": [row.to_json() for row in result.oracle],
                "allocation": result.allocation,
                "claims": result.claims,
            },
            indent=2,
        )
    return 1 if result.failed else 0


def add_allocate(subparsers) -> None:
    allocate_cmd = subparsers.add_parser(
        "allocate", help="the configuration the sweep's fitted allocation model predicts best for a budget"
    )
    allocate_cmd.add_argument("--budget", required=True, help="effective-context budget, e.g. 8k")
    known = flags()
    add_flag(allocate_cmd, "--dataset", known=known, required=True)
    add_flag(allocate_cmd, "--lm", known=known, defaults=True, help="the LM the sweep ran with")
    add_flag(allocate_cmd, "--corpus", known=known, help="the corpus the sweep searched (default: the dataset's)")
    add_flag(allocate_cmd, "--runs-dir", known=known, defaults=True)
    allocate_cmd.set_defaults(func=cmd_allocate)


def cmd_allocate(args: argparse.Namespace) -> int:
    corpus = corpus_name(args.corpus) if args.corpus is not None else None
    resume.end_abandoned(args.runs_dir)  # a run its process left RUNNING when it died is marked KILLED
    sweep_dir = sweep_dir_for(args.runs_dir, args.dataset, args.lm, corpus)
    choice = allocate(sweep_dir, parse_size(args.budget, "--budget"))
    print(json.dumps(choice, indent=2))
    return 0


def add_parsers(subparsers) -> None:
    add_sweep(subparsers)
    add_allocate(subparsers)
