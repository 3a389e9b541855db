"""Do the weight layouts give float32's answers? RAG on HotpotQA dev with each layout, compared with fp32.

    python benchmarks/layouts.py [--layouts fp32,int8-bf16,bf16,int8] [--lm qwen2.5-coder-0.5b] [--limit 100]
                                 [--out-dir runs/layouts] [--json FILE]
    python benchmarks/layouts.py --layouts int8-bf16:hf,int8-bf16:compiled   # the decode step's ways

A layout may name the engine's way of decoding after a colon (``decoder.DECODE_WAYS``; default: the engine's).

Each layout of ``--layouts`` (``programs/lm/layouts.py``; the first is the reference, fp32 by default) answers the
first ``--limit`` HotpotQA dev questions with uncompiled RAG (hybrid retrieval, k = 5, 4 threads, DSPy's cache
off): one ``run_experiment`` per layout, its summary written to ``<out-dir>/<layout>__n<limit>.json`` so a rerun
skips finished layouts. The table gives, per layout: EM, F1, the share of questions whose greedy answer is the
reference's word for word, the questions that failed (an adapter parse failure or an error), questions per minute,
and the paired bootstrap 95% CI of the EM difference from the reference. The layouts share nothing: each loads
the model anew.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ragscale.experiments.files import write_json


def records(summary: dict, runs_dir: Path) -> dict[str, dict]:
    """The per-question records of a finished run, by question id (``ledger.run_records``)."""
    from ragscale.experiments.sweep.ledger import run_records

    rows = run_records(runs_dir, summary["mlflow_run_id"])
    if rows is None:
        raise SystemExit(f"run {summary['mlflow_run_id']} has no per-question records under {runs_dir}")
    return {row["id"]: row for row in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--layouts", default="fp32,int8-bf16,bf16,int8", help="comma-separated layouts, the reference first"
    )
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--out-dir", type=Path, default=Path("runs/layouts"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from ragscale.programs.lm.decoder import DECODE_WAYS
    from ragscale.programs.lm.models import WEIGHTS

    layouts = [w.strip() for w in args.layouts.split(",") if w.strip()]
    unknown = [w for w in layouts if w.split(":")[0] not in WEIGHTS or w.partition(":")[2] not in ("", *DECODE_WAYS)]
    if unknown or len(layouts) < 2:
        parser.error(
            f"--layouts: give at least two of {', '.join(WEIGHTS)}, each with an optional :WAY of "
            f"{', '.join(DECODE_WAYS)} (unknown: {unknown})"
        )

    from ragscale.process import prepare_process

    prepare_process()
    from ragscale.experiments.config import RunConfig
    from ragscale.experiments.paired import paired_bootstrap
    from ragscale.experiments.runner import run_experiment

    args.out_dir.mkdir(parents=True, exist_ok=True)
    runs_dir = args.out_dir.parent
    summaries = {}
    for layout in layouts:
        path = args.out_dir / f"{layout.replace(':', '-')}__n{args.limit}.json"
        if path.exists():
            summaries[layout] = json.loads(path.read_text(encoding="utf-8"))
            continue
        weights, _, decode = layout.partition(":")
        config = RunConfig(
            method="rag", dataset="hotpotqa", lm=args.lm, weights=weights, limit=args.limit, threads=args.threads,
            cache=False, runs_dir=runs_dir, run_name=f"layouts-{layout.replace(':', '-')}-n{args.limit}",
        )  # fmt: skip
        if decode:
            os.environ["RAGSCALE_DECODE"] = decode  # read when the engine loads (engine.decode_way)
        summaries[layout] = run_experiment(config, progress=False)
        os.environ.pop("RAGSCALE_DECODE", None)
        write_json(path, summaries[layout], indent=2)

    reference = records(summaries[layouts[0]], runs_dir)
    rows = []
    for layout in layouts:
        mine = records(summaries[layout], runs_dir)
        same = sum(mine[i]["prediction"] == reference[i]["prediction"] for i in reference if i in mine)
        ci = paired_bootstrap(
            {i: 100 * r["em"] for i, r in mine.items()}, {i: 100 * r["em"] for i, r in reference.items()}
        )
        s = summaries[layout]
        rows.append({"layout": layout, "n": s["n"], "em": s["em"], "f1": s["f1"], "failed": s["failed"],
                     "same_answer": 100 * same / len(reference), "questions_per_minute": s["questions_per_minute"],
                     "em_diff": ci.diff, "em_diff_low": ci.low, "em_diff_high": ci.high})  # fmt: skip
    print(f"\n{args.lm}, uncompiled RAG, {args.limit} HotpotQA dev questions, reference {layouts[0]}\n")
    print("| weights | EM | F1 | same answer as the reference | failed | questions/min | EM difference [95% CI] |")
    print("|---|--:|--:|--:|--:|--:|---|")
    for r in rows:
        diff = f"{r['em_diff']:+.1f} [{r['em_diff_low']:+.1f}, {r['em_diff_high']:+.1f}]"
        print(f"| {r['layout']} | {r['em']:.1f} | {r['f1']:.1f} | {r['same_answer']:.0f}% | {r['failed']} | "
              f"{r['questions_per_minute']:.1f} | {diff} |")  # fmt: skip
    if args.json:
        write_json(args.json, {"lm": args.lm, "limit": args.limit, "rows": rows}, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
