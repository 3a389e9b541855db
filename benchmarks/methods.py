"""Every registered method, uncompiled and compiled, on each dataset: the methods table, with the oracle rows and
each method's paired CI against RAG.

    python benchmarks/methods.py [--datasets hotpotqa] [--limit 100] [--lm qwen2.5-coder-0.5b] [--api-base URL]
                                 [--teacher qwen2.5-coder-1.5b] [--methods rag,crag] [--optimizers none,bootstrap]
                                 [--no-oracle] [--out-dir runs/methods-<lm>] [--runs-dir runs] [--json FILE]
                                 [--adopt benchmarks/results/NAME]

Per dataset it runs RAG uncompiled first (the baseline of every comparison), then each method x optimizer in registry
order, then the two oracle rows (the RAG program given the question's gold paragraphs, and given them padded to k with
retrieved distractors). Every cell is a ``cells.Cells`` run: the runner of ``ragscale run`` on the first ``--limit`` dev
questions, compiled with the teacher LM running DSPy's teacher program on the first ``--train-limit`` train questions
(``bootstrap``), its summary and per-question scores kept as JSON in ``--out-dir`` (MLflow's store is ``--runs-dir``),
so a rerun skips finished cells, an interrupted benchmark resumes, and a folder of finished cells prints its table and
CIs on any machine. ``--adopt`` names a published folder (``benchmarks/publish.py``) whose cells count as finished: a
table measured over sittings on machines that keep nothing runs only what the folder lacks. Uncompiled DRAG sends
exactly RAG's prompts (DRAG differs only by its demonstrations), so it is not run: its row is RAG's. A cell that
cannot run (a configuration error, prompts over the context window) is reported and the others go on.

Prints one table per dataset: EM, F1, Acc, retrieval recall, LM calls and effective context per question,
questions per minute (the evaluation alone), compile seconds, the method's behaviour values, and the paired
bootstrap 95% CI of its EM minus RAG's over the same questions.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cells import EFFECTIVE_CONTEXT, ORACLE_ROWS, Cells, behaviour_cell, paired

from ragscale.experiments.files import write_json

BASELINE = ("rag", "none")

COLUMNS = (
    ("EM", "em", "{:.1f}"),
    ("F1", "f1", "{:.1f}"),
    ("Acc", "acc", "{:.1f}"),
    ("recall", "retrieval_recall", "{:.1f}"),
    ("calls / q", "lm_calls_per_question", "{:.2f}"),
    ("context / q", EFFECTIVE_CONTEXT, "{:,.0f}"),
    ("q / min", "questions_per_minute", "{:.1f}"),
    ("compile s", "compile_s", "{:,.0f}"),
)


def plan(methods: list[str], optimizers: list[str], oracle: bool) -> list[tuple[str, str]]:
    """The cells of one dataset in the order they run: RAG uncompiled, every other method x optimizer (not
    uncompiled DRAG, which is RAG), then the oracle rows."""
    cells = [BASELINE] if "rag" in methods and "none" in optimizers else []
    cells += [(m, o) for m in methods for o in optimizers if (m, o) not in (BASELINE, ("drag", "none"))]
    return cells + ([(row, "none") for row in ORACLE_ROWS] if oracle else [])


def row_of(row: str, optimizer: str, summary: dict, versus: str) -> str:
    cells = [row, optimizer, str(summary["n"])]
    cells += ["" if summary.get(key) is None else fmt.format(summary[key]) for _, key, fmt in COLUMNS]
    return "| " + " | ".join([*cells, versus, behaviour_cell(summary)]) + " |"


def header() -> str:
    names = ["method", "optimizer", "n", *(c[0] for c in COLUMNS), "EM vs RAG [95% CI]", "behaviour"]
    return "| " + " | ".join(names) + " |\n|---|---|" + "--:|" * (len(names) - 4) + "---|---|"


def main(argv: list[str] | None = None) -> int:
    from ragscale.programs import PROGRAMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="hotpotqa", help="comma-separated (default hotpotqa)")
    parser.add_argument("--limit", type=int, default=100, help="dev questions per dataset (default 100)")
    parser.add_argument("--train-limit", type=int, default=16, help="train questions the teacher bootstraps on")
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b", help="the reader: it answers every dev question")
    parser.add_argument("--api-base", help="the reader's OpenAI-compatible server (with --lm openai/<model>)")
    parser.add_argument("--teacher", default="qwen2.5-coder-1.5b", help="runs the teacher program when compiling")
    parser.add_argument("--methods", default=",".join(PROGRAMS), help="comma-separated (default: all)")
    parser.add_argument("--optimizers", default="none,bootstrap")
    parser.add_argument("--docs", type=int, default=5, help="documents k each method retrieves (default 5)")
    parser.add_argument("--no-oracle", action="store_true", help="leave out the two oracle rows")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--corpus", help="every cell's --corpus (default: each dataset's own; the docs' cells: questions)"
    )
    parser.add_argument("--out-dir", type=Path, help="where the cells' JSON goes (default runs/methods-<lm>)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="MLflow's store and the indexes")
    parser.add_argument("--json", type=Path, help="write every summary and comparison as one JSON file")
    parser.add_argument("--adopt", type=Path, metavar="FOLDER", help="a published folder whose cells count as done")
    args = parser.parse_args(argv)
    if args.adopt is not None and not (args.adopt / "manifest.json").is_file():
        parser.error(f"--adopt {args.adopt}: no manifest.json there (a folder benchmarks/publish.py wrote)")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in PROGRAMS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; valid: {', '.join(PROGRAMS)}")
    optimizers = [o.strip() for o in args.optimizers.split(",") if o.strip()]

    from ragscale.process import prepare_process

    prepare_process()
    from ragscale.experiments.config import ConfigError
    from ragscale.experiments.paired import format_ci
    from ragscale.optimizers.context import ContextWindowError

    runner = Cells(
        lm=args.lm,
        teacher=args.teacher,
        limit=args.limit,
        train_limit=args.train_limit,
        out_dir=args.out_dir or args.runs_dir / f"methods-{args.lm.replace('/', '_')}",
        threads=args.threads,
        corpus=args.corpus,
        prefix="methods",
        api_base=args.api_base,
        runs_dir=args.runs_dir,
        docs=args.docs,
        adopt=args.adopt,
    )
    report: dict = {"lm": args.lm, "teacher": args.teacher, "limit": args.limit, "datasets": {}}
    skipped = []
    for dataset in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        print(f"\n{dataset}, {args.lm}\n\n{header()}", flush=True)
        done, rows = {}, []
        for row, optimizer in plan(methods, optimizers, not args.no_oracle):
            try:
                summary = runner.run(dataset, row, optimizer)
            except (ConfigError, ContextWindowError) as exc:  # this cell cannot run; the others still can
                print(f"| {row} | {optimizer} | not run: {exc} |", flush=True)
                skipped.append(f"{dataset}: {row} x {optimizer}")
                continue
            done[(row, optimizer)] = summary
            versus, comparison = "", None
            if BASELINE in done and (row, optimizer) != BASELINE:
                ci = paired(summary, done[BASELINE], runner.runs_dir)
                versus = format_ci(ci)
                comparison = {"diff": ci.diff, "low": ci.low, "high": ci.high, "n": ci.n}
            rows.append({"row": row, "optimizer": optimizer, "em_vs_rag": comparison, **summary})
            print(row_of(row, optimizer, summary, versus), flush=True)
            if (row, optimizer) == BASELINE and "drag" in methods and "none" in optimizers:
                rows.append(
                    {"row": "drag", "optimizer": "none (= rag)", "em_vs_rag": None, **summary, "method": "drag"}
                )
                print(row_of("drag", "none (= rag)", summary, ""), flush=True)
        report["datasets"][dataset] = rows
    print("\n* the CI excludes 0")
    if args.json:
        write_json(args.json, report, indent=2)
    if skipped:
        print(f"\nnot run: {', '.join(skipped)}")
    return 1 if skipped else 0


if __name__ == "__main__":
    raise SystemExit(main())
