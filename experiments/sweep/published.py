"""A sweep committed with its answers: every configuration's per-question records, from which its report is made
again.

``publish`` copies a finished sweep to a folder (``benchmarks/results/<name>/``): each configuration's and oracle
row's per-question records (``published.KEPT``: id, prediction, gold, EM/F1/Acc, passages, tokens, behaviour) as
``<label>.jsonl.gz`` (``rag-k5-m2``, ``iterdrag-k5-m2-n3``, ``oracle-gold``), the accuracy-against-context plot, and a
manifest with the command, date, machine and commit, the grid, and each row as it ran (its run, timings and the
estimate made before it). ``load`` reads the folder back with every score of every row re-derived from its records
(``evaluate.record_scores``), and ``report`` makes from them alone what the sweep reported: the budget table (each
best chosen on one half of the questions, reported on the other), the grid, the claims as one family, and the
allocation model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ragscale.experiments.files import write_json
from ragscale.experiments.published import MANIFEST, provenance, read_records, write_records
from ragscale.experiments.sweep.rows import Row

SCORED = ("em", "f1", "acc", "n", "failed", "effective_context_tokens_per_question", "output_tokens_per_question",
          "lm_calls_per_question")  # fmt: skip
"""The fields of a row that its records give again: the rest (timings, estimates) are the manifest's."""
PLOT = "accuracy_vs_context.png"
PARTS = ("table", "grid", "claims", "fit")
"""What ``report`` makes: the budget table, the grid, the claims and the allocation model."""


def file_name(row: Row) -> str:
    """``rag k=5 m=2`` -> ``rag-k5-m2``: a row's label as a file name."""
    return row.label.replace("=", "").replace(" ", "-")


@dataclass(frozen=True)
class Sweep:
    """A published sweep read back: its manifest, its rows and oracle rows with their scores re-derived, and each
    run's per-question EM in percent by run id (what its claims pair)."""

    manifest: dict[str, Any]
    rows: list[Row]
    oracle: list[Row]
    em: dict[str, dict[str, float]]

    @property
    def budgets(self) -> list[int]:
        return sorted(self.manifest["grid"]["budgets"])

    @property
    def n(self) -> int:
        return max((r.n for r in self.rows), default=0)


def publish(sweep_dir: Path, runs_dir: Path, folder: Path, *, command: str) -> Path:
    """Copy the sweep whose results are in ``sweep_dir`` (its runs in the store ``runs_dir``) to ``folder``."""
    from ragscale.experiments import tracking
    from ragscale.experiments.sweep.ledger import RESULTS
    from ragscale.experiments.sweep.report import plot
    from ragscale.experiments.sweep.scores import read

    results = read(Path(sweep_dir) / RESULTS)
    folder.mkdir(parents=True, exist_ok=True)
    published: dict[str, dict[str, dict]] = {"rows": {}, "oracle": {}}
    for part in published:
        for values in results[part]:
            row = Row.from_json(values, source=str(Path(sweep_dir) / RESULTS))
            if row.measured:
                write_records(folder / f"{file_name(row)}.jsonl.gz", runs_dir, row.run_id, row.label)
                published[part][file_name(row)] = row.to_json()
    if not published["rows"]:
        raise FileNotFoundError(f"{sweep_dir}: no configuration of the sweep finished; nothing to publish")
    first = next(iter(published["rows"].values()))["run_id"]
    params = tracking.client(runs_dir).get_run(first).data.params
    manifest = {
        **provenance(runs_dir, first, command),
        "dataset": params["dataset"],
        "lm": params["lm"],
        "grid": results["grid"],
        **published,
    }
    write_json(folder / MANIFEST, manifest, indent=2)
    swept = load(folder)
    title = f"{manifest['dataset']}, {manifest['lm']}, {swept.n} q"
    plot(swept.rows, swept.budgets, folder / PLOT, title=title, oracle=swept.oracle)
    return folder


def load(folder: Path) -> Sweep:
    """A published sweep with each row's scores re-derived from its records (see the module docstring)."""
    from ragscale.experiments.evaluate import record_scores

    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    parts: dict[str, list[Row]] = {"rows": [], "oracle": []}
    em: dict[str, dict[str, float]] = {}
    for part, rows in parts.items():
        for name, values in manifest[part].items():
            records = read_records(folder / f"{name}.jsonl.gz")
            scores = record_scores(records)
            row = Row.from_json(values, source=f"{folder / MANIFEST} {name}")
            rows.append(replace(row, **{k: scores[k] for k in SCORED}))
            em[row.run_id] = {str(r["id"]): 100.0 * r["em"] for r in records}
    return Sweep(manifest, parts["rows"], parts["oracle"], em)


def report(sweep: Sweep) -> dict[str, str]:
    """What the sweep reported, made again from its records alone: ``PARTS`` by name, each as the sweep's
    ``table.md`` writes it."""
    from ragscale.experiments.sweep.claims import check_claims, format_claims
    from ragscale.experiments.sweep.heldout import HeldOut
    from ragscale.experiments.sweep.report import (
        budget_table,
        fit_allocation,
        format_allocation,
        format_grid,
        format_table,
    )

    rows, budgets = sweep.rows, sweep.budgets
    fitted = fit_allocation(rows, budgets, sweep.manifest["dataset"])
    held_out = HeldOut(lambda row: sweep.em.get(row.run_id), rows)
    claims = check_claims(rows, budgets, fitted, sweep.em.get, oracle=sweep.oracle)
    return {
        "table": format_table(budget_table(rows, budgets, held_out)),
        "grid": format_grid(rows),
        "claims": format_claims(claims, sweep.n),
        "fit": "no allocation model (too few configurations)" if fitted is None else format_allocation(fitted),
    }
