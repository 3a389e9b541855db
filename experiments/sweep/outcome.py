"""What a sweep found, written down when a sitting ends: its rows, the budget table, the paper's claims checked, the
plot, the allocation model, and its MLflow run's metrics and files."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from functools import cache, partial
from pathlib import Path

from ragscale.experiments import tracking
from ragscale.experiments.files import write_json
from ragscale.experiments.sweep import allocation, scores
from ragscale.experiments.sweep.claims import below_floor, check_claims, format_claims, format_floors, not_tested
from ragscale.experiments.sweep.grid import format_size
from ragscale.experiments.sweep.heldout import HeldOut
from ragscale.experiments.sweep.ledger import ALLOCATION, LEDGER, RESULTS, SCORES, run_records
from ragscale.experiments.sweep.plan import PlannedPoint, format_plan
from ragscale.experiments.sweep.replicas import server_urls
from ragscale.experiments.sweep.report import (
    budget_table,
    fit_allocation,
    format_allocation,
    format_grid,
    format_replicas,
    format_table,
)
from ragscale.experiments.sweep.report import plot as plot_rows
from ragscale.experiments.sweep.rows import Row
from ragscale.experiments.sweep.sitting import Sitting

log = logging.getLogger(__name__)

TABLE = "table.md"
PLOT = "accuracy_vs_context.png"
PLAN = "plan.md"


@dataclass
class SweepResult:
    sweep_dir: Path
    parent_run_id: str | None
    ran: list[str]
    skipped: list[str]
    failed: list[str]
    rows: list[Row]
    table: list[dict]
    allocation: dict | None
    plot_path: Path | None
    plan: list[PlannedPoint]
    oracle: list[Row] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # keys not run, or ended, at the time limit: a rerun runs them


def sweep_rows(sitting: Sitting) -> list[Row]:
    """The rows of the plan's configurations that have finished, in this sitting or an earlier one."""
    got, rows = sitting.got, []
    for item in sitting.planned:
        found = got.ledger.get(item.key) or got.tracked.get(item.key)
        if found is not None:
            row = {**item.row(), **found, "lm": sitting.base.lm}
            if "estimate_basis" not in found:  # ran before estimates were kept: this one was made after it ran
                row["estimate_basis"] += ", made after it ran"
            rows.append(Row.from_json(row, source=f"{got.sweep_dir / LEDGER} {item.key}"))
    return rows


def conclude(sitting: Sitting, oracle: list[Row]) -> SweepResult:
    """Fit the allocation model, check the paper's claims, and write and log the sitting's results (``write``);
    the result of the sweep as it stands."""
    base, grid = sitting.base, sitting.grid
    rows = sweep_rows(sitting)
    fitted = fit_allocation(rows, grid.budgets, base.dataset)
    claims: list[dict] = []
    below: dict[str, list[tuple[str, float, float]]] = {}
    per_question: dict[str, dict[str, float]] | None = None
    held_out = None
    try:
        records = cache(partial(run_records, base.runs_dir))  # each run's records read once: EM and floors
        per_question = scores.collect([*rows, *oracle], records)
        held_out = HeldOut(lambda row: per_question.get(row.run_id), rows)
        below = below_floor(rows, base.dataset, records)
        claims = not_tested(check_claims(rows, grid.budgets, fitted, per_question.get, oracle=oracle), below)
    except Exception as exc:  # the tables, the plot and the model are still written; the report says why not
        log.exception("the paper's claims were not checked")
        sitting.report(f"the paper's claims were not checked: {type(exc).__name__}: {exc}")
    table = budget_table(rows, grid.budgets, held_out)
    results = {
        "dataset": base.dataset,
        "lm": base.lm,
        "grid": asdict(grid),
        "rows": [r.to_json() for r in rows],
        "table": table,
        "oracle": [r.to_json() for r in oracle],
        "claims": claims,
        "below_floor": below,
    }
    plot_path = write(sitting, (rows, oracle), results, per_question, fitted)
    skipped = [p.key for p in sitting.planned if p.status != "run"]
    return SweepResult(
        sitting.got.sweep_dir, sitting.parent, sitting.ran, skipped, sitting.failed, rows, table, fitted, plot_path,
        sitting.planned, oracle, claims, sitting.stopped,
    )  # fmt: skip


def write(
    sitting: Sitting, found: tuple[list[Row], list[Row]], results: dict, per_question: dict | None,
    fitted: dict | None,
) -> Path | None:  # fmt: skip
    """Write ``results`` (``results.json``), the tables, the plan, the per-question scores, the plot of ``found``
    (the rows, the oracle rows) and the allocation model into the sweep's folder, report the tables (and, over
    several replicas, which ran what), and log them with the sweep's metrics to its MLflow run; returns the plot's
    path (None without rows)."""
    base, grid, sweep_dir, report = sitting.base, sitting.grid, sitting.got.sweep_dir, sitting.report
    rows, oracle = found
    questions = len(sitting.got.evalset)
    write_json(sweep_dir / RESULTS, results)
    # The folder's files are of this sitting: one left from an earlier one would not match results.json.
    if per_question is None:
        (sweep_dir / SCORES).unlink(missing_ok=True)
    else:
        scores.save(sweep_dir, per_question)
    if fitted is None:
        (sweep_dir / ALLOCATION).unlink(missing_ok=True)
    best, every = format_table(results["table"]), format_grid(rows)
    checked = format_claims(results["claims"], questions)
    floors = [format_floors(results["below_floor"])] if results["below_floor"] else []
    (sweep_dir / TABLE).write_text("\n\n".join([best, every, checked, *floors]) + "\n", encoding="utf-8")
    plan = format_plan(sitting.planned, sitting.planner.speed, questions)
    (sweep_dir / PLAN).write_text(plan + "\n", encoding="utf-8")
    artifacts = [sweep_dir / RESULTS, sweep_dir / TABLE, sweep_dir / PLAN]
    if per_question is not None:
        artifacts.append(sweep_dir / SCORES)
    plot_path = None
    if rows:
        title = f"{base.dataset}, {base.lm}, {questions} q"
        plot_path = plot_rows(rows, grid.budgets, sweep_dir / PLOT, title=title, oracle=oracle)
        artifacts.append(plot_path)
    if fitted is not None:
        allocation.save(sweep_dir / ALLOCATION, fitted)
        artifacts.append(sweep_dir / ALLOCATION)
    report(best)
    report(every)
    if rows and len(server_urls(base.api_base)) > 1:
        report(format_replicas(rows))
    if fitted is not None:
        report(format_allocation(fitted))
    report(checked)
    for text in floors:
        report(text)
    metrics: dict[str, float | None] = {"configurations_run": len(sitting.ran)}
    metrics["configurations_failed"] = len(sitting.failed)
    for r in results["table"]:
        for score in ("acc", "em", "f1"):
            metrics[f"{score}_{r['method']}_{format_size(r['budget'])}"] = r[score]
    if fitted is not None:
        metrics["allocation_r2"] = fitted["model"]["r2"]
        metrics["allocation_mse"] = fitted["model"]["mse"]
    tracking.log_metrics(base.runs_dir, sitting.parent, metrics)
    tracking.log_artifacts(base.runs_dir, sitting.parent, artifacts)
    return plot_path
