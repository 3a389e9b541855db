"""The ``ragscale`` command line: argument parsing and dispatch only.

One module per group of subcommands: ``runs`` (run, compare), ``documents`` (ingest, ask), ``sweep`` (sweep,
allocate); each adds its parsers with ``add_<name>(subparsers)``, which set ``func(args) -> exit code``. Exit
codes: 0 success, 2 a usage or configuration error (an unknown method, optimizer, dataset or LM name, listed with
the valid ones), 1 a failed run.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ragscale.experiments.cli import documents, runs, sweep
from ragscale.experiments.config import ConfigError

log = logging.getLogger("ragscale")

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
"""What keeps the libraries off the network: the model hub, ``datasets``, LiteLLM's price map, MLflow's telemetry."""


def go_offline() -> None:
    """Set ``OFFLINE_ENV`` (a variable already set wins); before DSPy, LiteLLM, MLflow, transformers or datasets is
    imported, as they read it then. Every entry point (the CLI, the demo, the benchmarks, the tests) does it."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragscale", description="RAG methods as compiled DSPy programs: run, compare, sweep, ingest, ask."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (runs, documents, sweep):
        group.add_parsers(subparsers)
    return parser


def prepare_process() -> None:
    """What every entry point does first: the offline environment (before DSPy, LiteLLM or MLflow is imported) and
    INFO logging with the chatty libraries quieted."""
    go_offline()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("alembic", "httpx", "LiteLLM", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `ragscale`; returns the exit code (also raised as SystemExit by argparse on bad usage)."""
    prepare_process()
    from ragscale.optimizers.context import ContextWindowError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.getLogger().setLevel(logging.DEBUG)
    try:
        return args.func(args)
    except ConfigError as exc:
        parser.exit(2, f"ragscale {args.command}: error: {exc}\n")
    except ContextWindowError as exc:
        parser.exit(2, f"ragscale {args.command}: error: the prompt does not fit: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
