"""The sweep's plan: every grid point with its key, estimated effective context and time, and whether it runs.

A point is "done" when its key is in the ledger or tagged on a finished MLflow run; "over budget" when even its
fewest tokens (``Estimate.low``) exceed the largest budget; "expected over budget" when an estimate learned from
finished configurations exceeds the largest budget by more than ``SLACK`` (a budget chooses among the
configurations whose mean effective context fits it, so no budget could choose this one; ``Grid.beyond_budget``
runs it anyway); "over context window" when its longest call, every iteration used, exceeds the LM's window; else
it will "run". ``format_plan`` prints it with the totals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ragscale.experiments.config import RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.identity import config_key, data_fingerprint
from ragscale.experiments.sweep.carry import carried
from ragscale.experiments.sweep.estimate import Estimate, Planner
from ragscale.experiments.sweep.grid import Grid, Point, grid_points, point_config
from ragscale.experiments.sweep.ledger import run_records
from ragscale.experiments.sweep.speed import REUSED, Speed, speed_from_runs
from ragscale.programs.lm import context_window

SLACK = 0.1
"""How far past the largest budget a learned estimate may reach and its configuration still run: the margin for
the estimate's error, which the plan's "estimate" column lets one check against what was measured."""


@dataclass
class PlannedPoint:
    point: Point
    key: str
    docs_per_demo: int
    estimate: Estimate
    seconds: float
    status: str  # "run", "done", "over budget", "expected over budget", "over context window"

    def row(self) -> dict[str, Any]:
        return {
            **asdict(self.point),
            "key": self.key,
            "estimated_effective_context": round(self.estimate.tokens, 1),
            "estimated_low": round(self.estimate.low, 1),
            "estimated_high": round(self.estimate.high, 1),
            "estimated_calls": round(self.estimate.calls, 2),
            "estimate_basis": self.estimate.basis,
            "estimated_s": round(self.seconds, 1),
            "status": self.status,
        }


def plan(
    grid: Grid,
    base: RunConfig,
    *,
    lm,
    train: Sequence,
    evalset: Sequence,
    ledger: Mapping[str, dict],
    speed: Speed | None,
    docs_per_demo: int | None = None,
    teacher: str | None = None,
    tracked: Mapping[str, dict] | None = None,
    retriever=None,
    planner: Planner | None = None,
) -> list[PlannedPoint]:
    """Every grid point with its key, estimated effective context and time, and whether it will run ("done" when
    its key is in the ledger or in `tracked`, the sweep-tagged MLflow runs, whose per-question records calibrate
    the estimates of their method); else its status is ``status_of`` its estimate (see the module's doc). The
    planner's speed is fitted again on the finished configurations, each with the tokens its estimate finds a
    prefix cache held (``reused_row``); with fewer than three, it stays ``speed``."""
    if planner is None:
        planner = Planner.for_run(base, lm, train, evalset, retriever=retriever, speed=speed)
    fingerprint = data_fingerprint(train, evalset)
    window = context_window(lm)
    finished = {**(tracked or {}), **ledger}
    points = []
    for point in grid_points(grid):
        config = point_config(base, point, docs_per_demo=docs_per_demo, teacher=teacher)
        key = config_key(config, fingerprint)
        points.append((point, key, config.docs_per_demo))
        if key in finished:
            planner.learn(point, config.docs_per_demo, run_records(base.runs_dir, finished[key]["run_id"]))
    keys = {point: key for point, key, _ in points}
    estimates = {point: planner.estimate(point, per_demo)[0] for point, _, per_demo in points}
    timed = [reused_row(finished[key], estimates[point]) for point, key, _ in points if key in finished]
    planner.speed = speed_from_runs(timed, base.lm) or planner.speed
    planned = []
    for point, key, per_demo in points:
        estimate = estimates[point]
        seconds = planner.seconds(estimate)
        status = "done" if key in finished else status_of(estimate, grid, window)
        if status == "run":  # the questions it will carry from a finished smaller cap take no time
            seconds *= 1 - len(carried(point, keys, finished, base.runs_dir)[1]) / max(len(evalset), 1)
        planned.append(PlannedPoint(point, key, per_demo, estimate, seconds, status))
    return planned


def reused_row(row: Mapping[str, Any], estimate: Estimate) -> dict[str, Any]:
    """A finished configuration's ledger row with the tokens per question a prefix cache held (``REUSED``): its
    measured effective context times the share of it its estimate found reused."""
    share = estimate.reused / estimate.tokens if estimate.tokens else 0.0
    return {**row, REUSED: share * (row.get(EFFECTIVE_CONTEXT) or 0.0)}


def run_order(planned: Sequence[PlannedPoint]) -> list[PlannedPoint]:
    """The points that run, cheapest first by their estimate whatever their method: a sweep its time limit stops
    has then run every configuration up to some effective context, so the budgets below it have their best. An
    IterDRAG cap runs after its smaller ones (its estimate is larger), whose stopped questions it carries."""
    return sorted((p for p in planned if p.status == "run"), key=lambda p: (p.estimate.tokens, p.point.iterations))


def status_of(estimate: Estimate, grid: Grid, window: int) -> str:
    """Whether a point not yet done runs, by its estimate: "run", or why it is skipped (see the module's doc)."""
    largest = max(grid.budgets)
    if estimate.low > largest:
        return "over budget"
    if estimate.learned and estimate.tokens > largest * (1 + SLACK) and not grid.beyond_budget:
        return "expected over budget"
    if estimate.longest_call > window:
        return "over context window"
    return "run"


def format_plan(planned: Sequence[PlannedPoint], speed: Speed | None, n_questions: int) -> str:
    lines = [
        "| configuration | est. tokens/question | estimate | fewest-most | LM calls | est. time | status |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for p in planned:
        e = p.estimate
        time_text = f"{p.seconds / 60:.1f} min" if p.seconds == p.seconds else "?"
        spread = f"{e.low:,.0f}" if round(e.low) == round(e.high) else f"{e.low:,.0f}-{e.high:,.0f}"
        lines.append(
            f"| {p.point.label} | {e.tokens:,.0f} | {e.basis} | {spread} | {e.calls:.1f} | {time_text} | {p.status} |"
        )
    todo = [p for p in planned if p.status == "run"]
    total = sum(p.seconds for p in todo)
    speed_text = speed.describe() if speed else "speed not measured"
    lines.append("")
    lines.append(
        "estimate: calibrated = learned from this sweep's finished configurations of the same method and shots (how "
        "often IterDRAG asks another follow-up, the follow-ups it asked, adapter retries); follow-ups = IterDRAG's "
        "follow-ups learned from other shot counts, retries not yet; bound = IterDRAG at every iteration (nothing "
        "learned yet); counted = each call once (a floor: retries add). fewest-most: without retries, IterDRAG "
        "stopping at its first decomposition to every iteration used; over budget = even the fewest exceed the "
        f"largest budget; expected over budget = a learned estimate exceeds it by more than {SLACK:.0%}, so no "
        "budget could choose it (rechecked just before each configuration runs; --beyond-budget runs them). est. "
        "time leaves out the questions IterDRAG carries from a finished smaller iteration cap, once that one has "
        "finished, and the leading messages a call shares with an earlier one (the system turn, the "
        "demonstrations), which a prefix cache holds: they count as effective context but are not computed again."
    )
    reach = ""  # the configurations run cheapest first: what is done is everything up to the cheapest left
    if todo:
        cheapest = min(p.estimate.tokens for p in todo)
        reach = f"every configuration estimated under {cheapest:,.0f} tokens/question done or skipped; "
    lines.append(
        f"{len(todo)} to run, {sum(p.status == 'done' for p in planned)} done, "
        f"{sum(p.status not in ('run', 'done') for p in planned)} skipped; {n_questions} questions each; {reach}"
        f"estimated {total / 60:.1f} min of LM time ({speed_text}); plus loading, indexing and compiling"
    )
    return "\n".join(lines)
