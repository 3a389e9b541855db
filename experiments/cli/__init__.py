"""The ``ragscale`` command line: argument parsing and dispatch only.

One module per group of subcommands: ``runs`` (run, compare), ``documents`` (ingest, ask), ``sweep`` (sweep,
allocate), ``tracking_server`` (mlflow: MLflow's own command line, offline); each adds its parsers with
``add_<name>(subparsers)``, which set ``func(args) -> exit code``. Exit codes: 0 success; 1 a failed run (more than
``--max-failed`` of its questions failed, or it raised); 2 a usage or configuration error (an unknown method,
optimizer, dataset or LM name, listed with the valid ones; a bad input file; a server named by URL that does not
answer, or whose API fails); 130 stopped by Ctrl-C and 143 by SIGTERM (the run is KILLED, its finished questions
kept: the same command resumes it). A full disk, a quota or a read-only file system, wherever a command meets it,
ends it with one line naming the path and exit 1 (its run FAILED when the store still takes the status). The
``ragscale`` command (``entry``) ends within seconds of SIGTERM, or of its last line, even while a request that a
stopped run left behind still waits on a server (``signals.end_process_within``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ragscale.experiments.cli import documents, runs, sweep, tracking_server
from ragscale.experiments.config import ConfigError
from ragscale.experiments.files import disk_error, one_line
from ragscale.experiments.reach import check_reachable, is_http
from ragscale.experiments.runner import RunFailedError
from ragscale.experiments.signals import (
    EXIT_GRACE_S,
    INTERRUPTED_EXIT,
    TERMINATED_EXIT,
    Terminated,
    end_process_within,
    terminate_on_sigterm,
)
from ragscale.optimizers.context import ContextWindowError
from ragscale.optimizers.floors import CompilationFailedError
from ragscale.process import prepare_process

log = logging.getLogger("ragscale")

TRACKED = ("run", "compare", "sweep", "allocate")
"""The subcommands that write or read MLflow runs, and so take ``--tracking-uri``."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragscale", description="RAG methods as compiled DSPy programs: run, compare, sweep, ingest, ask."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (runs, documents, sweep, tracking_server):
        group.add_parsers(subparsers)
    for name in TRACKED:
        subparsers.choices[name].add_argument(
            "--tracking-uri",
            dest="tracking_uri",
            help="MLflow tracking server or store (default: MLFLOW_TRACKING_URI, else a sqlite store in --runs-dir)",
        )
    return parser


def check_tracking_server(flag: str | None) -> None:
    """A tracking server given by URL (``--tracking-uri``, else ``MLFLOW_TRACKING_URI``) answers, before anything
    runs: MLflow's own client would retry a refused connection for minutes."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if is_http(uri):
        check_reachable(uri, "--tracking-uri" if flag else "MLFLOW_TRACKING_URI", "mlflow")


def main(argv: Sequence[str] | None = None, *, end_process: bool = False) -> int:
    """Entry point of `ragscale`; returns the exit code (also raised as SystemExit by argparse on bad usage).
    ``end_process`` (``entry``'s, the command's own process) ends the process within seconds of SIGTERM
    (``terminate_on_sigterm``)."""
    prepare_process()
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "tracking_uri", None):  # the flag over the environment over the local default
        os.environ["MLFLOW_TRACKING_URI"] = args.tracking_uri
    if args.verbose:
        logging.getLogger().setLevel(logging.DEBUG)
    try:
        if args.command in TRACKED:
            check_tracking_server(getattr(args, "tracking_uri", None))
        with terminate_on_sigterm(end_process=end_process):
            return args.func(args)
    except ConfigError as exc:
        parser.exit(2, f"ragscale {args.command}: error: {exc}\n")
    except ContextWindowError as exc:
        parser.exit(2, f"ragscale {args.command}: error: the prompt does not fit: {exc}\n")
    except RunFailedError as exc:
        print(f"ragscale {args.command}: the run failed: {exc}", file=sys.stderr)
        return 1
    except CompilationFailedError as exc:
        print(f"ragscale {args.command}: the compilation failed: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if disk_error(exc) is None:
            raise
        print(f"ragscale {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, Terminated) as exc:
        stopped = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
        print(f"ragscale {args.command}: {stopped}; rerun the same command to resume", file=sys.stderr)
        return INTERRUPTED_EXIT if isinstance(exc, KeyboardInterrupt) else TERMINATED_EXIT


def entry() -> None:
    """The ``ragscale`` command: ``main``, ended within seconds of SIGTERM, and then the process ended within
    ``EXIT_GRACE_S`` with its exit status, as the interpreter's own exit would end it unless a thread still waits on a
    server: a request that a stopped run or sweep left behind ends only when it gives up (``--request-timeout``)."""
    try:
        code = main(end_process=True)
    except SystemExit as exit_:
        end_process_within(EXIT_GRACE_S, exit_.code if isinstance(exit_.code, int) else 1)
        raise
    end_process_within(EXIT_GRACE_S, code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
