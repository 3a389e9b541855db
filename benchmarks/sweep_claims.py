"""The paper's claims of a finished sweep, checked again from its folder alone, and compared with those it stored.

    python benchmarks/sweep_claims.py FOLDER [FOLDER ...]

A FOLDER is a sweep's folder (``runs/sweeps/<dataset>-<lm>/``) or a copy of its ``results.json``, ``scores.json`` and
``allocation.json``; a published sweep (``benchmarks/results/sweep-*/``) is checked from its records instead, by the
``sweep`` directive of ``published/directives.py``. Each claim's paired CIs are computed again from each question's
EM in ``scores.json`` (``ragscale.experiments.sweep.scores.recheck``, adjusted as one family), with no model, MLflow
store or run folder; the claims table is printed, and the exit code is 1 when a folder's claims differ from the ones its
``results.json`` holds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ragscale.experiments.config import ConfigError
from ragscale.experiments.sweep.claims import format_claims
from ragscale.experiments.sweep.scores import recheck


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    differ = []
    for folder in args.folders:
        try:
            again, stored = recheck(folder)
        except ConfigError as exc:
            raise SystemExit(f"sweep_claims: {exc}") from exc
        n = max((p["n"] for c in again for p in c["pairs"] if p.get("n")), default=0)
        changed = [c["claim"] for c in again if c not in stored] + [c["claim"] for c in stored if c not in again]
        print(f"{folder}: {len(again)} claims, {n} questions; "
              f"{'DIFFERENT from' if changed else 'the same as'} the claims in its results.json\n")  # fmt: skip
        print(format_claims(again, n) + "\n")
        if changed:
            print("differing: " + "; ".join(dict.fromkeys(changed)) + "\n")
            differ.append(folder)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
