"""``ragscale run``: compile and evaluate one configuration; ``ragscale compare``: tracked runs side by side."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ragscale.experiments import family, resume, tracking
from ragscale.experiments.chart import plot
from ragscale.experiments.cli.flags import add_flags
from ragscale.experiments.compare import (
    compare_runs,
    format_csv,
    format_table,
    load_runs,
    provenance_note,
    rows_to_json,
)
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.files import write_json
from ragscale.experiments.inputs import check_inputs, check_output_file
from ragscale.experiments.runner import MAX_FAILED, run_experiment


def add_run(subparsers) -> None:
    run = subparsers.add_parser(
        "run",
        help="compile a method on DIR/D/train.jsonl and evaluate it on DIR/D/dev.jsonl, tracked in MLflow",
        description="Flags override the values of --config; a flag left out keeps the TOML's or the default.",
        argument_default=argparse.SUPPRESS,
    )
    run.add_argument("--config", type=Path, help="a TOML run config (see runs/configs/)")
    add_flags(
        run, "--method", "--dataset", "--optimizer", "--lm", "--teacher", "--api-base", "--teacher-api-base",
        "--weights", "--adapter", "--docs", "--iterations", "--reflection-lm", "--budget", "--shots", "--docs-per-demo",
        "--metric", "--limit", "--train-limit", "--data-dir", "--eval-file", "--retriever", "--corpus", "--chroma-url",
        "--request-timeout", "--runs-dir", "--threads", "--seed", "--run-name", "--no-cache", "--trace", "--no-autolog",
    )  # fmt: skip
    run.add_argument("--json", dest="json_path", type=Path, help="also write the summary to this JSON file")
    add_flags(run, "--no-progress")
    run.add_argument(
        "--fresh",
        action="store_true",
        help="start a new run even if a killed or failed run of the same configuration and data, or a finished one "
        "with failed questions, can be resumed",
    )
    run.add_argument(
        "--max-failed",
        dest="max_failed",
        type=float,
        help=f"the run is FAILED (exit 1) when more than this fraction of its questions failed (default: {MAX_FAILED})",
    )
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    values = dict(vars(args))
    for key in ("command", "func", "json_path", "progress", "config", "verbose", "fresh", "max_failed", "tracking_uri"):
        values.pop(key, None)
    if getattr(args, "config", None) is not None:
        config = RunConfig.from_toml(args.config, method_defaults=True, **values)
    else:
        config = RunConfig.from_mapping(values, source="command line", method_defaults=True)
    corpus = check_inputs(config)  # read to check it, and searched as it was read
    json_path = getattr(args, "json_path", None)
    if json_path is not None:
        check_output_file(json_path, "--json")
    summary = run_experiment(
        config,
        corpus=corpus,
        progress=getattr(args, "progress", True),
        fresh=getattr(args, "fresh", False),
        max_failed=getattr(args, "max_failed", MAX_FAILED),
    )
    text = json.dumps(summary, indent=2)
    print(text)
    if json_path is not None:
        write_json(json_path, summary, indent=2)
    return 0


def add_compare(subparsers) -> None:
    compare = subparsers.add_parser(
        "compare",
        help="table of tracked runs with paired bootstrap 95%% CIs of EM and F1 differences against a baseline",
    )
    compare.add_argument(
        "--baseline",
        help="run id, unique id prefix or run name (default: per dataset, the latest "
        "closed-book run, else the first run)",
    )
    add_flags(compare, "--runs-dir", defaults=True)
    compare.add_argument(
        "--all",
        dest="all_runs",
        action="store_true",
        help="every run, not only the latest per method x optimizer x dataset x LM",
    )
    compare.add_argument(
        "--unfinished",
        action="store_true",
        help="also the FAILED and KILLED runs that logged predictions (marked with their status)",
    )
    compare.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default: 2000)")
    compare.add_argument("--seed", type=int, default=0)
    compare.add_argument("--json", dest="json_path", type=Path, help="also write the rows to this JSON file")
    compare.add_argument("--format", choices=("md", "json", "csv"), default="md", help="printed table (default: md)")
    compare.add_argument(
        "--chart",
        type=Path,
        help="PNG of EM and F1 with 95%% CIs and effective context per run, written with the markdown table beside "
        "it (.md) and logged to MLflow as a compare run (default: <runs-dir>/compare.png)",
    )
    compare.add_argument("--no-chart", dest="no_chart", action="store_true", help="print the table only")
    compare.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    if args.json_path is not None:
        check_output_file(args.json_path, "--json")
    resume.end_abandoned(args.runs_dir)  # a run its process left RUNNING when it died is shown KILLED
    runs = load_runs(args.runs_dir, unfinished=args.unfinished)
    if not runs:
        print(f"no finished runs in {tracking.tracking_uri(args.runs_dir)}", file=sys.stderr)
        return 1
    chart = args.chart or args.runs_dir / "compare.png"
    if not args.no_chart:
        if chart.suffix != ".png":
            raise ConfigError(f"--chart {chart} must be a .png file")
        check_output_file(chart, "--chart")
    try:
        rows = compare_runs(
            runs, baseline=args.baseline, latest_only=not args.all_runs, resamples=args.resamples, seed=args.seed
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    notes = [
        f"d = run - baseline in points; paired bootstrap over shared question ids, {args.resamples} resamples; "
        f"* = an EM difference called real, {family.RULE}; F1 is secondary, never marked",
        provenance_note(rows),
    ]
    table = "\n\n".join([format_table(rows), *[note for note in notes if note]])
    if args.format == "md":
        print(table)
    else:
        print(json.dumps(rows_to_json(rows), indent=2) if args.format == "json" else format_csv(rows), end="\n")
    if not args.no_chart:
        plot(rows, runs, chart, resamples=args.resamples, seed=args.seed)
        chart.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
        run_id, lock = resume.start_claimed(args.runs_dir, run_name=f"compare-{len(rows)}-runs",
                                            params={"runs": len(rows)}, kind="compare")  # fmt: skip
        with lock:
            try:
                tracking.log_artifacts(args.runs_dir, run_id, [chart, chart.with_suffix(".md")])
            except BaseException:
                tracking.end_run(args.runs_dir, run_id, status="FAILED")
                raise
            tracking.end_run(args.runs_dir, run_id)
        print(f"chart: {chart} (and {chart.with_suffix('.md').name}); MLflow run {run_id}", file=sys.stderr)
    if args.json_path is not None:
        write_json(args.json_path, rows_to_json(rows), indent=2)
    return 0


def add_parsers(subparsers) -> None:
    add_run(subparsers)
    add_compare(subparsers)
