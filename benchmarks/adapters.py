"""Which adapter should a small local model answer through? ragscale's FieldAdapter against DSPy's ChatAdapter and
JSONAdapter, on the same questions.

    python benchmarks/adapters.py [--lm qwen2.5-coder-0.5b] [--method rag] [--limit 100] [--json FILE]

Runs ``run_experiment`` (the path of ``ragscale run``) on the first ``--limit`` HotpotQA dev questions over HotpotQA's
fixed corpus (hybrid retrieval, k = 5), once per adapter (``field``, ``chat``, ``json``), the model loaded once and
DSPy's cache off. Prints each adapter's EM, F1 and the questions whose reply did not parse (failed: they score 0),
and each adapter's EM against ``field``'s, paired over the questions, with its bootstrap 95% CI. ``--json`` writes
every question's EM and error per adapter with the command, machine and date, so the table is made again from it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from ragscale.experiments.files import write_json

ADAPTERS = ("field", "chat", "json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--method", default="rag")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--runs-dir", type=Path, help="runs and indexes (default: a temp dir)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process()
    from ragscale.experiments.config import RunConfig
    from ragscale.experiments.paired import paired_bootstrap
    from ragscale.experiments.parts import load_lm_for
    from ragscale.experiments.runner import run_experiment
    from ragscale.experiments.sweep.ledger import run_records
    from ragscale.published.runs import made_here

    made_by = made_here()
    records: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        config = RunConfig(method=args.method, dataset="hotpotqa", lm=args.lm, limit=args.limit, threads=args.threads,
                           cache=False, runs_dir=runs_dir, autolog=False)  # fmt: skip
        lm = load_lm_for(config)
        for adapter in ADAPTERS:
            summary = run_experiment(replace(config, adapter=adapter, run_name=f"adapter-{adapter}"), lm=lm,
                                     progress=False, max_failed=1.0)  # fmt: skip
            records[adapter] = run_records(runs_dir, summary["mlflow_run_id"])
    em = {a: {r["id"]: 100 * r["em"] for r in rows} for a, rows in records.items()}
    print(f"\n{args.method} on {args.limit} HotpotQA dev questions, {args.lm}, HotpotQA's corpus, k = 5\n")
    print("| adapter | EM | F1 | failed | EM - field's [95% CI] |\n|---|--:|--:|--:|---|")
    for adapter, rows in records.items():
        n = len(rows)
        ci = paired_bootstrap(em[adapter], em["field"])
        versus = "" if adapter == "field" else f"{ci.diff:+.1f} [{ci.low:+.1f}, {ci.high:+.1f}]"
        print(f"| {adapter} | {sum(em[adapter].values()) / n:.1f} | {100 * sum(r['f1'] for r in rows) / n:.1f} | "
              f"{sum(r['error'] is not None for r in rows)} | {versus} |")  # fmt: skip
    if args.json:
        command = "python benchmarks/adapters.py " + " ".join(argv if argv is not None else sys.argv[1:])
        kept = {a: [{k: r[k] for k in ("id", "prediction", "em", "f1", "error")} for r in rows]
                for a, rows in records.items()}  # fmt: skip
        write_json(args.json, {"command": command, "made": made_by, "lm": args.lm, "method": args.method,
                               "limit": args.limit, "records": kept}, indent=2)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
