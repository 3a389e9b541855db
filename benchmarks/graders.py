"""How well does the Grade predictor of CRAG and Self-RAG judge passages, before and after compiling on labels?

    python benchmarks/graders.py [--lm qwen2.5-coder-0.5b] [--teacher qwen2.5-coder-1.5b] [--limit 50]
                                 [--train-limit 32] [--optimizers none,labeled,bootstrap] [--shots 4]
                                 [--calibrate] [--json FILE] [--publish NAME]

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
row "<optimizer>-calibrated". With `--publish NAME`, every passage's grade and margin is committed to
`benchmarks/results/NAME/` (`ragscale.published.graders`), from which a page's `graders NAME` directive makes the
table again.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import logging
import shlex
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ragscale.experiments.files import write_json
from ragscale.published.graders import format_table, publish, record, scores
from ragscale.published.runs import made_here

RESULTS = Path(__file__).resolve().parent / "results"


def grade(grader, examples, threads: int) -> tuple[list[dict], float]:
    """Each passage's grade as committed (``graders.record``), and the seconds grading took."""

    def one(example):
        prediction = grader(**example.inputs(), config={"logprobs": True})
        return record(example.passage_id, example.grade, prediction.grade, grader.probabilities(prediction))

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:  # each task runs in a copy of this thread's dspy.context
        graded = [f.result() for f in [pool.submit(contextvars.copy_context().run, one, e) for e in examples]]
    return graded, time.perf_counter() - start


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
    parser.add_argument("--publish", metavar="NAME", help="commit every grade to benchmarks/results/NAME/")
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process(logging.WARNING)
    import dspy

    from ragscale.data import load_split
    from ragscale.experiments.parts import TEACHER_DECODE, load_named_lm
    from ragscale.optimizers.graders import compile_graders, grade_examples
    from ragscale.optimizers.teleprompters import TEACHER_OPTIMIZERS
    from ragscale.programs.calibration import CalibratedPredict
    from ragscale.programs.lm import make_adapter, meter
    from ragscale.signatures import Grade

    made_by = made_here()  # the code and machine of this run, whatever is committed while it runs
    lm = load_named_lm(args.lm, cache=False)
    teacher = load_named_lm(args.teacher, cache=False, decode=TEACHER_DECODE) if args.teacher else None
    adapter = make_adapter("field")
    train = load_split("hotpotqa", "train")[: args.train_limit]
    dev = grade_examples(load_split("hotpotqa", "dev")[: args.limit], ids=True)
    rows, grades = {}, {}
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
            params = {"optimizer": optimizer, "shots": args.shots, "train_questions": len(train),
                      "demo_grades": dict(Counter(str(d.get("grade")) for d in grader.demos))}  # fmt: skip
            metrics = {"compile_lm_calls": usage.calls, "compile_s": time.perf_counter() - start}
            grades[optimizer], metrics["grade_s"] = grade(grader, dev, args.threads)
            rows[optimizer] = {"params": params, "metrics": metrics}
            print(json.dumps({**params, **metrics, **scores(grades[optimizer])}), flush=True)
            if args.calibrate:
                start = time.perf_counter()
                with meter() as usage:
                    grader.calibrate(lm=lm)
                name = f"{optimizer}-calibrated"
                calibrated = {"compile_lm_calls": metrics["compile_lm_calls"] + usage.calls,
                              "compile_s": metrics["compile_s"] + time.perf_counter() - start}  # fmt: skip
                grades[name], calibrated["grade_s"] = grade(grader, dev, args.threads)
                rows[name] = {"params": {**params, "calibration": grader.calibration}, "metrics": calibrated}
                print(json.dumps({**rows[name]["params"], **calibrated, **scores(grades[name])}), flush=True)

    taught = f", bootstrap taught by {args.teacher}" if args.teacher else ""
    sizes = f"{len(dev)} HotpotQA dev passages ({args.limit} questions), {len(train)} train questions"
    print(f"\n{args.lm}{taught}: {sizes}\n")
    print(format_table(rows, grades))
    if args.publish:
        command = shlex.join(["python", "benchmarks/graders.py", *(argv if argv is not None else sys.argv[1:])])
        print(f"\npublished to {publish(RESULTS / args.publish, rows, grades, command=command, made_by=made_by)}")
    if args.json:
        found = {name: {**row["params"], **row["metrics"], **scores(grades[name])} for name, row in rows.items()}
        write_json(args.json, {"lm": args.lm, "teacher": args.teacher, "n": len(dev), "rows": found}, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
