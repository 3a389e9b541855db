"""A sweep committed with its answers: every configuration's per-question records, from which its report is made
again, and from which a sweep on another machine goes on.

``publish`` copies a sweep's finished configurations to a folder (``benchmarks/results/<name>/``): each configuration's
and oracle row's per-question records (``runs.KEPT``: id, prediction, gold, EM/F1/Acc, passages, tokens, follow-ups,
behaviour) as ``<label>.jsonl.gz`` (``rag-k5-m2``, ``iterdrag-k5-m2-n3``, ``oracle-gold``), the programs compiled for
each method and shot count (``compiled/``, JSON), the accuracy-against-context plot, and a manifest with the command,
the dataset, LM and grid, and each row as it ran (its key, run, timings, the estimate made before it, and the machine
and commit it was made on). A folder is published again as the sweep goes on: the rows already in it are kept as they
are, so a sweep run over several sittings, on several machines, gathers in one folder. The other way, a sweep on a
fresh machine adopting a published folder's rows (``ragscale sweep --adopt``), is the runtime's:
``experiments.sweep.adopt``, which also reads the folder's format (its manifest, each row's records) for this module.

``load`` reads a folder back with every score of every row re-derived from its records (``evaluate.record_scores``),
and ``report`` makes from them alone what the sweep reported: the budget table (each best chosen on one half of the
questions, reported on the other), the grid, the claims as one family, and the allocation model; and the estimate
each configuration was planned with beside what it counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, record_scores
from ragscale.experiments.files import write_json
from ragscale.experiments.sweep.adopt import MANIFEST, PUBLISHED_FIELDS, copy_compiled, manifest_of, read_records
from ragscale.experiments.sweep.claims import (
    below_floor,
    check_claims,
    format_claims,
    format_floors,
    format_verdicts,
    not_tested,
)
from ragscale.experiments.sweep.grid import file_label
from ragscale.experiments.sweep.heldout import HeldOut
from ragscale.experiments.sweep.ledger import RESULTS
from ragscale.experiments.sweep.report import (
    budget_table,
    fit_allocation,
    format_allocation,
    format_estimates,
    format_grid,
    format_table,
    plot,
)
from ragscale.experiments.sweep.rows import Row
from ragscale.experiments.sweep.scores import read
from ragscale.published.runs import SUPERSEDED, made, points_by_run, predictions, refuse_dirty, supersede, write_records

SCORED = ("em", "f1", "acc", "n", "failed", EFFECTIVE_CONTEXT, "output_tokens_per_question", "lm_calls_per_question")
"""The fields of a row that its records give again: the rest (timings, estimates) are the manifest's."""
PLOT = "accuracy_vs_context.png"
PARTS = ("table", "grid", "claims", "verdicts", "fit", "estimates", "floors")
"""What ``report`` makes: the budget table, the grid, the claims (in full, and in short: each with the comparison
that decides it), the allocation model, each configuration's effective context as estimated before it ran
beside what it counted, and the configurations with learned demonstrations that fall below a floor of their method
(``floors.shortfalls``)."""


@dataclass(frozen=True)
class Sweep:
    """A published sweep read back: its manifest, its rows and oracle rows with their scores re-derived, each
    run's per-question EM in percent by run id (what its claims pair), and the floors each configuration with learned
    demonstrations falls below, by label (none where it keeps them)."""

    manifest: dict[str, Any]
    rows: list[Row]
    oracle: list[Row]
    em: dict[str, dict[str, float]]
    below_floor: dict[str, list[tuple[str, float, float]]]

    @property
    def budgets(self) -> list[int]:
        return sorted(self.manifest["grid"]["budgets"])

    @property
    def n(self) -> int:
        return max((r.n for r in self.rows), default=0)


def publish(sweep_dir: Path, runs_dir: Path, folder: Path, *, command: str) -> Path:
    """Copy the finished rows of the sweep whose results are in ``sweep_dir`` (its runs in the store ``runs_dir``,
    or adopted) to ``folder``, keeping the rows the folder already holds (see the module docstring). A new row
    made from a checkout with uncommitted changes is refused (``runs.refuse_dirty``), before anything is written."""
    results = read(Path(sweep_dir) / RESULTS)
    if "dataset" not in results:
        raise ConfigError(
            f"{Path(sweep_dir) / RESULTS}: names no dataset (written by an older ragscale); rerun the sweep"
        )
    earlier = manifest_of(folder) if (folder / MANIFEST).exists() else {"rows": {}, "oracle": {}}
    client = tracking.client(runs_dir)
    new: dict[tuple[str, str], tuple[Row, dict]] = {}  # each new row checked before anything is written
    for part in ("rows", "oracle"):
        for values in results[part]:
            row = Row.from_json(values, source=str(Path(sweep_dir) / RESULTS))
            kept = earlier[part].get(file_label(row.label))
            if row.measured and (kept is None or kept["run_id"] != row.run_id):
                new[part, file_label(row.label)] = row, made(client.get_run(row.run_id))
                refuse_dirty(new[part, file_label(row.label)][1], f"{row.label} (run {row.run_id})")
    folder.mkdir(parents=True, exist_ok=True)
    published: dict[str, dict[str, dict]] = {"rows": {}, "oracle": {}}
    superseded = list(earlier.get(SUPERSEDED, []))
    for part, rows in published.items():
        for values in results[part]:
            row = Row.from_json(values, source=str(Path(sweep_dir) / RESULTS))
            if not row.measured:
                continue
            name = file_label(row.label)
            kept = earlier[part].get(name)
            if (part, name) in new:
                path = folder / f"{name}.jsonl.gz"
                before = predictions(path)
                write_records(path, runs_dir, row.run_id, row.label)
                entry = {**row.to_json(), "made": new[part, name][1], "command": command}
                kept = supersede(kept, entry, superseded, f"{part}/{name}", before, path)
            rows[name] = kept
    for part in ("rows", "oracle"):
        for stale, entry in earlier[part].items():
            if stale not in published["rows"] and stale not in published["oracle"]:
                (folder / f"{stale}.jsonl.gz").unlink(missing_ok=True)
            if stale not in published[part]:
                superseded.append({"name": f"{part}/{stale}", **entry})
    if not published["rows"]:
        raise FileNotFoundError(f"{sweep_dir}: no configuration of the sweep finished; nothing to publish")
    manifest = {
        "command": command,
        "date": datetime.now(UTC).date().isoformat(),
        "dataset": results["dataset"],
        "lm": results["lm"],
        "grid": results["grid"],
        **published,
        SUPERSEDED: superseded,
    }
    write_json(folder / MANIFEST, manifest, indent=2)
    copy_compiled(Path(sweep_dir), folder)
    swept = load(folder)
    title = f"{manifest['dataset']}, {manifest['lm']}, {swept.n} q"
    plot(swept.rows, swept.budgets, folder / PLOT, title=title, oracle=swept.oracle)
    return folder


def load(folder: Path) -> Sweep:
    """A published sweep with each row's scores re-derived from its records (see the module docstring)."""
    manifest = manifest_of(folder)
    parts: dict[str, list[Row]] = {"rows": [], "oracle": []}
    records: dict[str, list[dict]] = {}  # by run id
    for part, rows in parts.items():
        for name, values in manifest[part].items():
            row = Row.from_json({k: v for k, v in values.items() if k not in PUBLISHED_FIELDS},
                                source=f"{folder / MANIFEST} {name}")  # fmt: skip
            records[row.run_id] = read_records(folder / f"{name}.jsonl.gz")
            scores = record_scores(records[row.run_id])
            rows.append(replace(row, **{k: scores[k] for k in SCORED}))
    below = below_floor(parts["rows"], manifest["dataset"], records.get)
    return Sweep(manifest, parts["rows"], parts["oracle"], points_by_run(records), below)


def report(sweep: Sweep) -> dict[str, str]:
    """What the sweep reported, made again from its records alone: ``PARTS`` by name, each as the sweep's
    ``table.md`` writes it."""
    rows, budgets = sweep.rows, sweep.budgets
    fitted = fit_allocation(rows, budgets, sweep.manifest["dataset"])
    held_out = HeldOut(lambda row: sweep.em.get(row.run_id), rows)
    claims = not_tested(check_claims(rows, budgets, fitted, sweep.em.get, oracle=sweep.oracle), sweep.below_floor)
    return {
        "table": format_table(budget_table(rows, budgets, held_out)),
        "grid": format_grid(rows),
        "claims": format_claims(claims, sweep.n),
        "verdicts": format_verdicts(claims, sweep.n),
        "fit": "no allocation model (too few configurations)" if fitted is None else format_allocation(fitted),
        "estimates": format_estimates(rows),
        "floors": format_floors(sweep.below_floor),
    }
