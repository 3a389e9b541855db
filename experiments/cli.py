"""The `ragscale` command line: `run` one experiment, `compare` tracked runs.

Each subcommand is added by an `_add_<name>(subparsers)` function that sets `func`; later commands (`ingest`,
`ask`, `sweep`, `allocate`) plug in the same way. Exit codes: 0 success, 2 a usage or configuration error (an
unknown method, optimizer, dataset or LM name, listed with the valid ones), 1 a failed run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ragscale.experiments.config import ADAPTERS, ConfigError, RunConfig

log = logging.getLogger("ragscale")

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


def _add_run(subparsers) -> None:
    from ragscale.data import DATASETS
    from ragscale.optimizers.metrics import METRICS
    from ragscale.optimizers.teleprompters import OPTIMIZERS
    from ragscale.programs import PROGRAMS
    from ragscale.programs.retrieval import RETRIEVERS

    run = subparsers.add_parser(
        "run",
        help="compile a method on DIR/D/train.jsonl and evaluate it on DIR/D/dev.jsonl, tracked in MLflow",
        description="Flags override the values of --config; a flag left out keeps the TOML's or the default.",
        argument_default=argparse.SUPPRESS,
    )
    run.add_argument("--config", type=Path, help="a TOML run config (see runs/configs/)")
    run.add_argument("--method", choices=sorted(PROGRAMS), help="the RAG method")
    run.add_argument("--dataset", choices=list(DATASETS), help="dataset folder under --data-dir")
    run.add_argument("--optimizer", choices=sorted(OPTIMIZERS), help="teleprompter (default: none)")
    run.add_argument(
        "--lm",
        help="a preset, a local HF model dir, a .gguf file, or openai/<model> with --api-base (default: smollm2-135m)",
    )
    run.add_argument("--api-base", dest="api_base", help="URL of an OpenAI-compatible server (vLLM, SGLang)")
    run.add_argument("--adapter", choices=ADAPTERS, help="how prompts are formatted and parsed (default: field)")
    run.add_argument("--k", type=int, help="passages retrieved per query (default: 5)")
    run.add_argument("--max-iterations", dest="max_iterations", type=int, help="IterDRAG steps (default: 3)")
    run.add_argument("--max-demos", dest="max_demos", type=int, help="demonstrations per predictor (default: 4)")
    run.add_argument(
        "--max-docs-per-demo",
        dest="max_docs_per_demo",
        type=int,
        help="documents kept in each demonstration (default: 3)",
    )
    run.add_argument("--metric", choices=sorted(METRICS), help="metric the teleprompter optimises (default: em)")
    run.add_argument("--limit", type=int, help="evaluate on the first N questions")
    run.add_argument(
        "--train-limit", dest="train_limit", type=int, help="compile on the first N train questions (default: 64)"
    )
    run.add_argument(
        "--data-dir",
        dest="data_dir",
        type=Path,
        help="datasets folder (default: RAGSCALE_DATA_DIR or ../shared/datasets)",
    )
    run.add_argument("--eval-file", dest="eval_file", type=Path, help="evaluate on this JSONL instead of dev.jsonl")
    run.add_argument("--retriever", choices=RETRIEVERS, help="default: hybrid (dense + BM25, RRF)")
    run.add_argument("--chroma-url", dest="chroma_url", help="a chromadb server (default: embedded, under runs/)")
    run.add_argument("--runs-dir", dest="runs_dir", type=Path, help="MLflow store, indexes, artifacts (default: runs)")
    run.add_argument("--threads", type=int, help="questions answered in parallel (default: 4)")
    run.add_argument("--seed", type=int, help="default: 0")
    run.add_argument("--run-name", dest="run_name", help="MLflow run name (default: method-optimizer-dataset-lm-time)")
    run.add_argument("--no-cache", dest="cache", action="store_false", help="bypass the DSPy LM cache")
    run.add_argument("--json", dest="json_path", type=Path, help="also write the summary to this JSON file")
    run.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    run.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ragscale.experiments.runner import run_experiment

    values = dict(vars(args))
    for key in ("command", "func", "json_path", "progress", "config", "verbose"):
        values.pop(key, None)
    if getattr(args, "config", None) is not None:
        config = RunConfig.from_toml(args.config, **values)
    else:
        config = RunConfig.from_mapping(values, source="command line")
    summary = run_experiment(config, progress=getattr(args, "progress", True))
    text = json.dumps(summary, indent=2)
    print(text)
    json_path = getattr(args, "json_path", None)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text + "\n", encoding="utf-8")
    return 0


def _add_compare(subparsers) -> None:
    compare = subparsers.add_parser(
        "compare",
        help="table of tracked runs with paired bootstrap 95%% CIs of EM and F1 differences against a baseline",
    )
    compare.add_argument(
        "--baseline",
        help="run id, unique id prefix or run name (default: per dataset, the latest "
        "closed-book run, else the first run)",
    )
    compare.add_argument("--runs-dir", dest="runs_dir", type=Path, default=Path("runs"))
    compare.add_argument(
        "--all",
        dest="all_runs",
        action="store_true",
        help="every run, not only the latest per method x optimizer x dataset x LM",
    )
    compare.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default: 2000)")
    compare.add_argument("--seed", type=int, default=0)
    compare.add_argument("--json", dest="json_path", type=Path, help="also write the rows to this JSON file")
    compare.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ragscale.experiments.compare import compare_runs, format_table, load_runs, rows_to_json

    runs = load_runs(args.runs_dir)
    if not runs:
        print(f"no finished runs under {args.runs_dir.resolve()}", file=sys.stderr)
        return 1
    try:
        rows = compare_runs(
            runs, baseline=args.baseline, latest_only=not args.all_runs, resamples=args.resamples, seed=args.seed
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    print(format_table(rows))
    print(
        f"\nd = run - baseline in points; paired bootstrap over shared question ids, {args.resamples} resamples; "
        "* = 95% CI excludes 0"
    )
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(rows_to_json(rows), indent=2) + "\n", encoding="utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragscale", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(subparsers)
    _add_compare(subparsers)
    from ragscale.experiments.documents import _add_ask, _add_ingest

    _add_ingest(subparsers)
    _add_ask(subparsers)
    from ragscale.experiments.sweep import add_allocate_parser as _add_allocate
    from ragscale.experiments.sweep import add_sweep_parser as _add_sweep

    _add_sweep(subparsers)
    _add_allocate(subparsers)
    return parser


def prepare_process() -> None:
    """What every entry point does first: the offline environment (before DSPy, LiteLLM or MLflow is imported) and
    INFO logging with the chatty libraries quieted."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("alembic", "httpx", "LiteLLM", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `ragscale`; returns the exit code (also raised as SystemExit by argparse on bad usage)."""
    prepare_process()
    from ragscale.optimizers.teleprompters import ContextWindowError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.getLogger().setLevel(logging.DEBUG)
    try:
        return args.func(args, parser)
    except ConfigError as exc:
        parser.exit(2, f"ragscale {args.command}: error: {exc}\n")
    except ContextWindowError as exc:
        parser.exit(2, f"ragscale {args.command}: error: the prompt does not fit: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
