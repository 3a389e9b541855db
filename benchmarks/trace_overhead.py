"""What does ``--trace`` cost? The same run with and without MLflow traces of its questions.

    python benchmarks/trace_overhead.py [--lm smollm2-135m] [--method rag] [--limit 20] [--rounds 3]
        [--corpus questions] [--json FILE]

Runs ``run_experiment`` (the path of ``ragscale run``) on the first ``--limit`` HotpotQA dev questions, untraced
and traced in turn for ``--rounds`` rounds, each a fresh run in a temporary runs directory with DSPy's cache off and
the model loaded once, after one untimed run that pays for compiling the decode step; reports the evaluation seconds
of each and the traced/untraced ratio of their medians. The corpus is by default the questions' own paragraphs,
whose index builds in seconds: the tracing's cost is per call, whatever is searched. ``--json`` writes the seconds
with the command, machine, commit and date.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from ragscale.experiments.files import write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="smollm2-135m")
    parser.add_argument("--method", default="rag")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--corpus", default="questions", help="what the runs retrieve from (default: questions)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process()
    from ragscale.experiments.config import RunConfig
    from ragscale.experiments.parts import load_lm_for
    from ragscale.experiments.runner import run_experiment
    from ragscale.published.runs import made_here

    made_by = made_here()  # the code and machine of this run, whatever is committed while it runs
    seconds: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as runs:
        config = RunConfig(method=args.method, dataset="hotpotqa", lm=args.lm, limit=args.limit, corpus=args.corpus,
                           threads=args.threads, cache=False, runs_dir=Path(runs))  # fmt: skip
        lm = load_lm_for(config)
        run_experiment(replace(config, run_name="warm-up"), lm=lm, progress=False, fresh=True)  # compiles the step
        for round_ in range(args.rounds):
            for traced in (False, True):
                name = f"{'traced' if traced else 'untraced'}-{round_}"
                summary = run_experiment(
                    replace(config, trace=traced, run_name=name), lm=lm, progress=False, fresh=True
                )
                seconds[traced].append(summary["eval_s"])
    untraced, traced = (statistics.median(seconds[t]) for t in (False, True))
    print(f"\n{args.method} on {args.limit} HotpotQA questions, {args.lm}, {args.threads} threads\n")
    print("| tracing | eval s per round | median s |\n|---|---|--:|")
    for flag, median in ((False, untraced), (True, traced)):
        print(f"| {'on' if flag else 'off'} | {', '.join(f'{s:.1f}' for s in seconds[flag])} | {median:.1f} |")
    print(f"\ntraced / untraced: {traced / untraced:.3f}")
    if args.json:
        command = "python benchmarks/trace_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_json(args.json, {"command": command, "made": made_by, "lm": args.lm, "method": args.method,
                               "limit": args.limit, "corpus": args.corpus, "threads": args.threads,
                               "seconds": {"off": seconds[False], "on": seconds[True]},
                               "ratio": traced / untraced}, indent=2)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
