"""How well does the Grade predictor of CRAG and Self-RAG judge passages, before and after compiling on labels?

    python benchmarks/graders.py [--lm qwen2.5-coder-0.5b] [--teacher qwen2.5-coder-1.5b] [--limit 50]
                                 [--train-limit 32] [--optimizers none,labeled,bootstrap] [--shots 4]
                                 [--calibrate] [--json FILE]

The labels come from the data: for each question, one supporting paragraph ("relevant") and one other paragraph
of the question ("irrelevant"), so half of the passages are relevant (`ragscale.optimizers.graders.grade_examples`).
Each optimizer compiles a fresh `CalibratedPredict(Grade)` (the grader of CRAG and Self-RAG) on the first
`--train-limit` HotpotQA train questions with `compile_graders` (the path `ragscale run` takes) and is scored on
the first `--limit` dev questions: accuracy, recall of each label, how often the grader said "ambiguous" (never
right: the labels are binary), and the LM calls and wall time of compiling and of grading. Where the LM scores
the options (the local engine), two columns say how far any decision rule could go: the AUC of the margin log
P(relevant) - log P(irrelevant), and the accuracy of the best single threshold on it, chosen on the dev passages
themselves (a ceiling, not a result). With `--teacher`, bootstrap's traces are the
teacher's (the graders compiled on the larger model's traces); `labeled` compiles on the labels alone. The LM
graded with is always `--lm`. DSPy's cache is off. With `--calibrate`, each optimizer's grader is scored a second
time after learning the prior its prompt gives on content-free inputs (`ragscale.programs.calibration`), as the
row "<optimizer> + calibration".
"""

from __future__ import annotations

import argparse
import contextvars
import json
import logging
import math
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ragscale.experiments.files import write_json

COLUMNS = ("optimizer", "demos", "accuracy", "relevant recall", "irrelevant recall", "ambiguous", "AUC",
           "best threshold", "compile LM calls", "compile s", "grade s")  # fmt: skip


def score(grader, examples, threads: int) -> dict:
    def one(example):
        prediction = grader(**example.inputs(), config={"logprobs": True})
        return prediction.grade, grader.probabilities(prediction)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:  # each task runs in a copy of this thread's dspy.context
        graded = [f.result() for f in [pool.submit(contextvars.copy_context().run, one, e) for e in examples]]
    seconds = time.perf_counter() - start
    grades = [grade for grade, _ in graded]

    def share(rows) -> float:
        return 100.0 * sum(g == e.grade for e, g in rows) / max(1, len(rows))

    pairs = list(zip(examples, grades, strict=True))
    return {
        "accuracy": share(pairs),
        "relevant_recall": share([p for p in pairs if p[0].grade == "relevant"]),
        "irrelevant_recall": share([p for p in pairs if p[0].grade == "irrelevant"]),
        "ambiguous": 100.0 * grades.count("ambiguous") / len(grades),
        **separation(examples, [p for _, p in graded]),
        "grade_s": seconds,
    }


def separation(examples, probabilities) -> dict:
    """How well the grader's margin log P(relevant) - log P(irrelevant) separates the labels, whatever the
    decision rule: its AUC, and the accuracy of the best single threshold on it (chosen on these passages: the
    ceiling of any calibration that moves one threshold). None when the LM gives no option scores."""
    if any(p is None for p in probabilities):
        return {"auc": None, "best_threshold_accuracy": None}
    margins = [math.log(p["relevant"]) - math.log(p["irrelevant"]) for p in probabilities]
    relevant = [e.grade == "relevant" for e in examples]
    pos = [m for m, r in zip(margins, relevant, strict=True) if r]
    neg = [m for m, r in zip(margins, relevant, strict=True) if not r]
    auc = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / max(1, len(pos) * len(neg))
    best = max(sum((m >= t) == r for m, r in zip(margins, relevant, strict=True)) for t in [*margins, math.inf])
    return {"auc": auc, "best_threshold_accuracy": 100.0 * best / len(margins)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--teacher", help="an LM that writes bootstrap's traces (e.g. qwen2.5-coder-1.5b)")
    parser.add_argument("--limit", type=int, default=50, help="dev questions (two labelled passages each)")
    parser.add_argument("--train-limit", type=int, default=32, help="train questions the teleprompter sees")
    parser.add_argument("--optimizers", default="none,labeled,bootstrap")
    parser.add_argument("--shots", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--calibrate", action="store_true", help="also score each grader calibrated")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process(logging.WARNING)
    import dspy

    from ragscale.data import load_split
    from ragscale.experiments.runner import TEACHER_DECODE, load_named_lm
    from ragscale.optimizers.graders import compile_graders, grade_examples
    from ragscale.optimizers.teleprompters import TEACHER_OPTIMIZERS
    from ragscale.programs.calibration import CalibratedPredict
    from ragscale.programs.lm import make_adapter, meter
    from ragscale.signatures import Grade

    lm = load_named_lm(args.lm, cache=False)
    teacher = load_named_lm(args.teacher, cache=False, decode=TEACHER_DECODE) if args.teacher else None
    adapter = make_adapter("field")
    train = load_split("hotpotqa", "train")[: args.train_limit]
    dev = grade_examples(load_split("hotpotqa", "dev")[: args.limit])
    rows = []
    with dspy.context(lm=lm, adapter=adapter):
        for optimizer in [o.strip() for o in args.optimizers.split(",") if o.strip()]:
            start = time.perf_counter()
            with meter() as usage:
                grader = compile_graders(
                    CalibratedPredict(Grade),
                    train,
                    optimizer=optimizer,
                    shots=args.shots,
                    lm=lm,
                    adapter=adapter,
                    teacher_lm=teacher if optimizer in TEACHER_OPTIMIZERS else None,
                )
            row = {"optimizer": optimizer, "demos": len(grader.demos), "compile_lm_calls": usage.calls,
                   "compile_s": time.perf_counter() - start,
                   "demo_grades": dict(Counter(str(d.get("grade")) for d in grader.demos))}  # fmt: skip
            row.update(score(grader, dev, args.threads))
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.calibrate:
                start = time.perf_counter()
                with meter() as usage:
                    grader.calibrate(lm=lm)
                row = {**row, "optimizer": f"{optimizer} + calibration", "calibration": grader.calibration,
                       "compile_lm_calls": row["compile_lm_calls"] + usage.calls,
                       "compile_s": row["compile_s"] + time.perf_counter() - start}  # fmt: skip
                row.update(score(grader, dev, args.threads))
                rows.append(row)
                print(json.dumps(row), flush=True)

    taught = f", bootstrap taught by {args.teacher}" if args.teacher else ""
    sizes = f"{len(dev)} HotpotQA dev passages ({args.limit} questions), {len(train)} train questions"
    print(f"\n{args.lm}{taught}: {sizes}\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|---|" + "--:|" * (len(COLUMNS) - 1))
    for r in rows:
        cells = [r["optimizer"], str(r["demos"]), f"{r['accuracy']:.1f}", f"{r['relevant_recall']:.1f}",
                 f"{r['irrelevant_recall']:.1f}", f"{r['ambiguous']:.1f}", _num(r["auc"], "{:.3f}"),
                 _num(r["best_threshold_accuracy"], "{:.1f}"), str(r["compile_lm_calls"]),
                 f"{r['compile_s']:.0f}", f"{r['grade_s']:.0f}"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    if args.json:
        write_json(args.json, {"lm": args.lm, "teacher": args.teacher, "n": len(dev), "rows": rows}, indent=2)
    return 0


def _num(value, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


if __name__ == "__main__":
    raise SystemExit(main())
