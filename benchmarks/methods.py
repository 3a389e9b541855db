"""Every registered method on the same HotpotQA dev questions, uncompiled and compiled: the methods table.

    python benchmarks/methods.py [--limit 50] [--lm qwen2.5-coder-0.5b] [--methods rag,crag]
                                 [--optimizers none,bootstrap]
                                 [--out-dir runs/methods-benchmark] [--json FILE]

For each method x optimizer it runs `run_experiment` (the same runner as `ragscale run`: hybrid retrieval over
the paragraphs of the run's questions, the teleprompter on `--train-limit` train questions, 8 threads, MLflow
under the runs dir) and writes the summary to `<out-dir>/<method>__<optimizer>.json`. A rerun skips every pair
whose JSON exists, so an interrupted benchmark resumes; delete a file to measure that pair again. The LM is
loaded once, with DSPy's cache off (uncompiled DRAG sends RAG's prompts: a cache would serve them from RAG's
run). Prints one markdown row per pair: EM, F1, retrieval recall, LM calls and effective context tokens per
question, questions per minute (the evaluation alone), seconds spent compiling, failed questions. A pair that
cannot run (a configuration error, or prompts over the context window) is reported and the others go on.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.files import write_json

COLUMNS = (
    ("method", "method", "{}"),
    ("optimizer", "optimizer", "{}"),
    ("EM", "em", "{:.1f}"),
    ("F1", "f1", "{:.1f}"),
    ("retrieval recall", "retrieval_recall", "{:.1f}"),
    ("LM calls / q", "lm_calls_per_question", "{:.2f}"),
    ("effective context / q", EFFECTIVE_CONTEXT, "{:,.0f}"),
    ("q / min", "questions_per_minute", "{:.1f}"),
    ("compile s", "compile_s", "{:,.0f}"),
    ("failed", "failed", "{}"),
)


def table(summaries: list[dict]) -> str:
    lines = ["| " + " | ".join(c[0] for c in COLUMNS) + " |", "|---|---|" + "--:|" * (len(COLUMNS) - 2)]
    for s in summaries:
        cells = ["" if s.get(key) is None else fmt.format(s[key]) for _, key, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from ragscale.programs import PROGRAMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=50, help="HotpotQA dev questions (default 50)")
    parser.add_argument("--train-limit", type=int, default=16, help="train questions the teleprompter sees")
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--methods", default=",".join(PROGRAMS), help="comma-separated (default: all)")
    parser.add_argument("--optimizers", default="none,bootstrap")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--out-dir", type=Path, default=Path("runs/methods-benchmark"))
    parser.add_argument("--json", type=Path, help="write every summary as one JSON list")
    args = parser.parse_args(argv)

    from ragscale.experiments.cli import prepare_process

    prepare_process()
    from ragscale.experiments.config import ConfigError, RunConfig
    from ragscale.experiments.runner import load_lm_for, run_experiment
    from ragscale.optimizers.context import ContextWindowError

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in PROGRAMS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; valid: {', '.join(PROGRAMS)}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    lm, summaries, skipped = None, [], []
    for method in methods:
        for optimizer in [o.strip() for o in args.optimizers.split(",") if o.strip()]:
            path = args.out_dir / f"{method}__{optimizer}.json"
            if path.exists():
                summaries.append(json.loads(path.read_text(encoding="utf-8")))
                continue
            config = RunConfig(
                method=method,
                dataset="hotpotqa",
                optimizer=optimizer,
                lm=args.lm,
                limit=args.limit,
                train_limit=args.train_limit,
                runs_dir=args.out_dir.parent,
                threads=args.threads,
                max_demos=2,
                max_docs_per_demo=3,
                cache=False,  # questions per minute of this run, not of an earlier run's cached calls
            )
            lm = lm or load_lm_for(config)
            start = time.perf_counter()
            try:
                summary = run_experiment(config, lm=lm, check_context=True, progress=False)
            except (ConfigError, ContextWindowError) as exc:  # this pair cannot run; the others still can
                print(f"| {method} | {optimizer} | not run: {exc} |", flush=True)
                skipped.append(f"{method} x {optimizer}")
                continue
            summary["benchmark_wall_s"] = round(time.perf_counter() - start, 1)
            write_json(path, summary, indent=2)
            summaries.append(summary)
            print(table(summaries[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(summaries))
    if args.json:
        write_json(args.json, summaries, indent=2)
    if skipped:
        print(f"\nnot run: {', '.join(skipped)}")
    return 1 if skipped else 0


if __name__ == "__main__":
    raise SystemExit(main())
