"""The demo behind `make demo`: closed-book, RAG, DRAG and IterDRAG compared on HotpotQA with paired CIs.

DRAG and IterDRAG are compiled with `bootstrap` on HotpotQA train, the teacher LM (the packaged 1.5B) writing the
traces; then closed-book, RAG, DRAG and IterDRAG are evaluated on the first N HotpotQA dev questions with the
default packaged model (IterDRAG with 3 documents per query, the others with 5; 2 shots of at most 3 documents
each), each run logged to MLflow under `runs/`, and the comparison is printed (paired bootstrap
CIs against closed-book). N = 100 by default: with 30 questions a CI is about 25 points wide.

    python -m ragscale.experiments.demo [--limit N] [--lm NAME] [--teacher NAME|none] [--runs-dir DIR] [--threads T]

One LM is loaded once and shared by the four runs; the retrieval index is built by the first retrieval run and
reused by the others (same corpus, same key).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ragscale.experiments.compare import compare_runs, format_table, load_runs
from ragscale.experiments.config import RunConfig
from ragscale.experiments.parts import load_lm_for
from ragscale.experiments.runner import run_experiment
from ragscale.experiments.tracking import is_local, tracking_uri
from ragscale.process import prepare_process
from ragscale.programs import method_named
from ragscale.programs.lm.models import DEFAULT_LM

TEACHER_LM = "qwen2.5-coder-1.5b"

DEMO_RUNS = (("closed-book", "none", 5), ("rag", "none", 5), ("drag", "bootstrap", 5), ("iterdrag", "bootstrap", 3))
"""(method, optimizer, documents per query) of each run; every run has 2 shots of at most 3 documents each."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ragscale-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100, help="HotpotQA dev questions to evaluate (default 100)")
    parser.add_argument("--train-limit", type=int, default=16, help="train questions the teleprompter sees")
    parser.add_argument("--lm", default=DEFAULT_LM, help="preset, local path or openai/<model>")
    parser.add_argument(
        "--teacher", default=TEACHER_LM, help=f"writes bootstrap's traces (default {TEACHER_LM}; none: the --lm itself)"
    )
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    prepare_process()

    start = time.perf_counter()
    configs = [
        RunConfig(
            method=method,
            dataset="hotpotqa",
            optimizer=optimizer,
            lm=args.lm,
            teacher=None if optimizer == "none" or args.teacher == "none" else args.teacher,
            limit=args.limit,
            train_limit=args.train_limit,
            runs_dir=args.runs_dir,
            threads=args.threads,
            docs=docs,
            shots=2,
            docs_per_demo=3,
        )
        for method, optimizer, docs in DEMO_RUNS
    ]
    lm = load_lm_for(configs[0])
    summaries = [run_experiment(config, lm=lm, check_context=True) for config in configs]
    wall = time.perf_counter() - start

    ids = {s["mlflow_run_id"] for s in summaries}
    runs = [run for run in load_runs(args.runs_dir) if run.run_id in ids]
    baseline = next(s["mlflow_run_id"] for s in summaries if not method_named(s["method"]).retrieves)
    print()
    print(format_table(compare_runs(runs, baseline=baseline, latest_only=False)))
    print(f"\n{len(summaries)} runs, {args.limit} HotpotQA dev questions each, {args.lm}: {wall / 60:.1f} min in all")
    uri = tracking_uri(args.runs_dir)
    if is_local(args.runs_dir):  # MLflow's own `mlflow ui` hangs offline: ragscale's sets the offline environment
        print(f"MLflow: {ragscale_command()} mlflow ui --backend-store-uri {uri}")
    else:
        print(f"MLflow: {uri}")
    return 0


def ragscale_command() -> str:
    """The ``ragscale`` command of this Python, relative to the working folder where it lies inside it."""
    command = Path(sys.executable).parent / "ragscale"
    return str(command.relative_to(Path.cwd())) if command.is_relative_to(Path.cwd()) else str(command)


if __name__ == "__main__":
    raise SystemExit(main())
