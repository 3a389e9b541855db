"""Do the methods do what their papers say on the model that answers? EM, F1, recall, context and behaviour.

    python benchmarks/faithful.py [--datasets hotpotqa,musique] [--limit 100] [--train-limit 16]
                                  [--lm qwen2.5-coder-0.5b] [--teacher qwen2.5-coder-1.5b]
                                  [--out-dir runs/faithful] [--gepa-budget light] [--json FILE]

For each dataset it runs, in this order (the claims first, so a benchmark cut short has them): IterDRAG
uncompiled, compiled and with labelled demonstrations (``labeled``: MuSiQue's gold decompositions, with the
documents retrieved for each step, where the data has them; no teacher), RAG uncompiled, DRAG compiled,
closed-book uncompiled, Self-RAG and CRAG compiled and uncompiled, closed-book compiled, the two oracle rows (the RAG
program given the question's gold paragraphs, and given them padded to k with retrieved distractors:
``OracleRetriever``), and last DRAG and IterDRAG compiled by GEPA (the teacher reflects; GEPA's light budget) to set
beside bootstrap. "Compiled" is ``bootstrap`` with the teacher LM running DSPy's teacher program on the first
``--train-limit`` train questions (2 demonstrations of at most 3 documents each); the student LM answers the first
``--limit`` dev questions (hybrid retrieval, k = 5, 8 threads, DSPy's cache off). Uncompiled DRAG sends exactly RAG's
prompts (DRAG differs only by its demonstrations), so its row is RAG's.

Each cell is one ``run_experiment`` (the path of ``ragscale run``, tracked in MLflow under the out dir's parent)
whose summary is written to ``<out-dir>/<dataset>__<cell>__n<limit>.json``: a rerun skips finished cells, so an
interrupted benchmark resumes where it stopped. Prints one table per dataset (EM, F1, retrieval recall,
effective context and LM calls per question, the behaviour columns) and the paired comparisons the paper makes,
each with n and the paired bootstrap 95% CI of the EM difference: compiled DRAG vs RAG, compiled IterDRAG vs
compiled DRAG, and compiled vs uncompiled for each method.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cells import EFFECTIVE_CONTEXT, Cells, behaviour_cell, paired

from ragscale.experiments.files import write_json

CELLS = (
    ("iterdrag", "none"),
    ("iterdrag", "bootstrap"),
    ("iterdrag", "labeled"),
    ("rag", "none"),
    ("drag", "bootstrap"),
    ("closed-book", "none"),
    ("self-rag", "bootstrap"),
    ("crag", "bootstrap"),
    ("self-rag", "none"),
    ("crag", "none"),
    ("closed-book", "bootstrap"),
    ("oracle-gold", "none"),
    ("oracle-distractors", "none"),
    ("drag", "gepa"),
    ("iterdrag", "gepa"),
)
"""(method or oracle row, optimizer), in the order they run."""

BEHAVIOUR_SHOWN = {
    "iterdrag": ("questions_with_follow_up", "follow_ups", "follow_ups_as_questions", "redrawn_follow_ups"),
    "self-rag": ("retrieval_rate", "relevant_passage_rate", "supported_fully_rate"),
    "crag": ("corrective_rate", "graded_relevant", "graded_ambiguous"),
}

PAIRS = (
    ("compiled DRAG vs RAG", ("drag", "bootstrap"), ("rag", "none")),
    ("compiled IterDRAG vs compiled DRAG", ("iterdrag", "bootstrap"), ("drag", "bootstrap")),
    ("IterDRAG compiled vs uncompiled", ("iterdrag", "bootstrap"), ("iterdrag", "none")),
    ("IterDRAG labeled vs uncompiled", ("iterdrag", "labeled"), ("iterdrag", "none")),
    ("Self-RAG compiled vs uncompiled", ("self-rag", "bootstrap"), ("self-rag", "none")),
    ("CRAG compiled vs uncompiled", ("crag", "bootstrap"), ("crag", "none")),
    ("closed-book compiled vs uncompiled", ("closed-book", "bootstrap"), ("closed-book", "none")),
    ("RAG vs closed-book", ("rag", "none"), ("closed-book", "none")),
    ("DRAG GEPA vs bootstrap", ("drag", "gepa"), ("drag", "bootstrap")),
    ("IterDRAG GEPA vs bootstrap", ("iterdrag", "gepa"), ("iterdrag", "bootstrap")),
)


def table(dataset: str, cells: dict) -> str:
    header = ("row", "optimizer", "n", "EM", "F1", "recall", "context / q", "calls / q", "compile calls", "behaviour")
    lines = [f"\n{dataset}\n", "| " + " | ".join(header) + " |", "|---|---|" + "--:|" * 7 + "---|"]
    for (row, optimizer), s in cells.items():
        recall = "" if s.get("retrieval_recall") is None else f"{s['retrieval_recall']:.1f}"
        lines.append(
            f"| {row} | {optimizer} | {s['n']} | {s['em']:.1f} | {s['f1']:.1f} | {recall} | "
            f"{s[EFFECTIVE_CONTEXT]:,.0f} | {s['lm_calls_per_question']:.2f} | {s.get('compile_lm_calls', 0)} | "
            f"{behaviour_cell(s, BEHAVIOUR_SHOWN.get(s['method'], ()))} |"
        )
    return "\n".join(lines)


def comparisons(cells: dict, runs_dir: Path) -> list[dict]:
    out = []
    for name, a, b in PAIRS:
        if a not in cells or b not in cells:
            continue
        for score in ("em", "f1"):
            ci = paired(cells[a], cells[b], runs_dir, score)
            out.append({"comparison": name, "score": score, "diff": ci.diff, "low": ci.low, "high": ci.high, "n": ci.n})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="hotpotqa,musique")
    parser.add_argument("--limit", type=int, default=100, help="dev questions per dataset (default 100)")
    parser.add_argument("--train-limit", type=int, default=16, help="train questions the teacher bootstraps on")
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b", help="the student: it answers every dev question")
    parser.add_argument("--teacher", default="qwen2.5-coder-1.5b", help="runs the teacher program when compiling")
    parser.add_argument("--cells", help="comma-separated row:optimizer cells to run (default: all, in order)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--corpus", help="every cell's --corpus (default: each dataset's own; the docs' cells: questions)"
    )
    parser.add_argument("--out-dir", type=Path, default=Path("runs/faithful"))
    parser.add_argument("--gepa-budget", default="light", help="GEPA cells: light, medium, heavy or N metric calls")
    parser.add_argument("--json", type=Path, help="write every summary and comparison as one JSON file")
    args = parser.parse_args(argv)
    cells = CELLS
    if args.cells:
        cells = tuple(tuple(c.strip().split(":")) for c in args.cells.split(",") if c.strip())
        unknown = [c for c in cells if c not in CELLS]
        if unknown:
            parser.error(f"unknown cell(s) {unknown}; valid: {', '.join(':'.join(c) for c in CELLS)}")

    from ragscale.process import prepare_process

    prepare_process()
    runner = Cells(
        lm=args.lm,
        teacher=args.teacher,
        limit=args.limit,
        train_limit=args.train_limit,
        out_dir=args.out_dir,
        threads=args.threads,
        corpus=args.corpus,
        gepa_budget=args.gepa_budget,
        prefix="faithful",
    )
    runs_dir = runner.runs_dir
    report: dict = {"lm": args.lm, "teacher": args.teacher, "limit": args.limit, "datasets": {}}
    for dataset in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        done: dict = {}
        for row, optimizer in cells:
            fresh = not runner.path(dataset, row, optimizer).exists()
            done[(row, optimizer)] = runner.run(dataset, row, optimizer)
            if fresh:
                print(table(dataset, {(row, optimizer): done[(row, optimizer)]}).splitlines()[-1], flush=True)
        if ("rag", "none") in done:
            done[("drag", "none (= rag)")] = {**done[("rag", "none")], "method": "drag"}
        print(table(dataset, done))
        pairs = comparisons(done, runs_dir)
        print("\n| comparison | score | n | difference [95% CI] |\n|---|---|--:|---|")
        for p in pairs:
            ci = f"{p['diff']:+.1f} [{p['low']:+.1f}, {p['high']:+.1f}]"
            print(f"| {p['comparison']} | {p['score']} | {p['n']} | {ci} |")
        report["datasets"][dataset] = {
            "cells": [{"row": r, "optimizer": o, **s} for (r, o), s in done.items()],
            "comparisons": pairs,
        }
    if args.json:
        write_json(args.json, report, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
