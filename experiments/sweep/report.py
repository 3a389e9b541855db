"""What a sweep found: per budget the best configuration per method and overall (the paper's Table 1 shape), every
configuration's accuracy and effective context, the plot of accuracy against effective context, and the
computation allocation model fitted on the grid.

A configuration belongs to budget B when its measured effective context is at most B; within a budget the best
has the highest EM (the primary metric of the claims), then F1, then Acc, then the fewest tokens. The budget table
chooses it on one half of the questions and reports its EM on the other (``heldout``). The grid and the plot show
Acc, the paper's measure of a configuration, and the allocation model is fitted on it, as the paper's is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.sweep import allocation
from ragscale.experiments.sweep.grid import Point, format_size, rows_of
from ragscale.experiments.sweep.rows import Row
from ragscale.programs import PROGRAMS, method_named

log = logging.getLogger(__name__)


def rank(row: Row) -> tuple:
    """The order of configurations within a budget: EM, then F1, then Acc, then the fewest tokens."""
    return (row.em, row.f1, row.acc, -row.effective_context())


def fits(row: Row, budget: float) -> bool:
    """Whether a configuration was measured and its effective context is at most ``budget``."""
    measured = row.acc is not None and row.effective_context_tokens_per_question is not None
    return measured and row.effective_context() <= budget


def best_within(rows: Sequence[Row], budget: float) -> Row | None:
    """The best measured configuration whose effective context is at most ``budget``; None when none fits."""
    return max((r for r in rows if fits(r, budget)), key=rank, default=None)


def budget_table(rows: Sequence[Row], budgets: Sequence[int], held_out=None) -> list[dict[str, Any]]:
    """Per budget, the best configuration per method and overall (the paper's Table 1 shape); DRAG's includes RAG's
    rows with no shot, DRAG without demonstrations (``grid.rows_of``). Given ``held_out``
    (a ``heldout.HeldOut``), each best is chosen on its choosing half of the questions and its EM is reported on
    the other (``em_held_out``); without it (the per-question scores could not be read), chosen on all of them."""
    table = []
    for budget in sorted(budgets):
        within = [r for r in rows if fits(r, budget)]
        # a method with rows anywhere has a column wherever its rows or, for DRAG, RAG's with no shot fit
        pools = {method: rows_of(method, within) for method in {r.method for r in rows}}
        methods = sorted((m for m, pool in pools.items() if pool), key=lambda m: (method_named(m).retrieves, m))
        for method in [*methods, "best"]:
            pool = within if method == "best" else pools[method]
            best = best_within(pool, budget) if held_out is None else held_out.best_within(pool, budget)
            if best is None:
                continue
            table.append(
                {
                    "budget": budget,
                    "method": method,
                    "config": best.label,
                    "em_held_out": None if held_out is None else held_out.em(best),
                    "em": best.em,
                    "f1": best.f1,
                    "acc": best.acc,
                    EFFECTIVE_CONTEXT: best.effective_context(),
                }
            )
    return table


def format_table(table: Sequence[Mapping[str, Any]]) -> str:
    """The budget table: each best's EM on the held-out half when it was chosen on the other, beside its EM, F1 and
    Acc on all the questions (where it was chosen, so they lean high)."""
    lines = [
        "| budget | method | best configuration | EM held out | EM | F1 | Acc | tokens/question |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        name = f"**{r['method']}**" if r["method"] == "best" else r["method"]
        held = "n/a" if r.get("em_held_out") is None else f"{r['em_held_out']:.1f}"
        lines.append(
            f"| {format_size(r['budget'])} | {name} | {r['config']} | {held} | {r['em']:.1f} | {r['f1']:.1f} "
            f"| {r['acc']:.1f} | {r[EFFECTIVE_CONTEXT]:,.0f} |"
        )
    return "\n".join(lines)


def format_grid(rows: Sequence[Row]) -> str:
    """Every measured configuration as Acc (tokens of effective context per question): a row per documents k and
    shots m, a column per method (IterDRAG's per iteration count); closed-book beneath."""
    measured = {(r.method, r.docs, r.shots, r.iterations): r for r in rows if r.acc is not None}
    columns = sorted({(m, n) for m, _, _, n in measured if method_named(m).retrieves}, key=lambda c: (order(c[0]), c))
    settings = sorted({(k, s) for m, k, s, _ in measured if method_named(m).retrieves})
    names = [f"{m} n={n}" if method_named(m).iterates else m for m, n in columns]
    lines = ["| k | m | " + " | ".join(names) + " |", "|--:|--:|" + "---|" * len(columns)]
    for k, shots in settings:
        cells = []
        for method, n in columns:
            r = measured.get((method, k, shots, n))
            cells.append("" if r is None else f"{r.acc:.1f} ({r.effective_context():,.0f})")
        lines.append(f"| {k} | {shots} | " + " | ".join(cells) + " |")
    for method in sorted({m for m, *_ in measured if not method_named(m).retrieves}):
        shown = [r for (m, *_), r in sorted(measured.items()) if m == method]
        lines += ["", f"{method}: " + ", ".join(f"m={r.shots} {r.acc:.1f}" for r in shown)]
    return "\n".join(lines)


def format_replicas(rows: Sequence[Row]) -> str:
    """Which server ran which configuration: a line per replica, its configurations in the rows' order."""
    ran: dict[str, list[str]] = {}
    for r in rows:
        ran.setdefault(r.replica or "a server not recorded", []).append(r.label)
    return "\n".join(f"on {replica}: {len(shown)} ran ({', '.join(shown)})" for replica, shown in sorted(ran.items()))


def format_estimates(rows: Sequence[Row]) -> str:
    """Every measured configuration's effective context as estimated just before it ran (``estimate.py``), its
    basis, and what its run counted: the error is the estimate's, relative to the count."""
    lines = [
        "| configuration | estimate | basis | counted | error |",
        "|---|--:|---|--:|--:|",
    ]
    for r in rows:
        counted, estimated = r.effective_context_tokens_per_question, r.estimated_effective_context
        if counted is None or estimated is None:
            continue
        error = f"{(estimated - counted) / counted:+.1%}" if counted else "n/a"
        lines.append(f"| {r.label} | {estimated:,.1f} | {r.estimate_basis} | {counted:,.1f} | {error} |")
    return "\n".join(lines)


def order(method: str) -> int:
    """A method's place in the registry (``programs.PROGRAMS``): the order of columns, and its colour."""
    return list(PROGRAMS).index(method)


def plot(
    rows: Sequence[Row],
    budgets: Sequence[int],
    path: Path,
    *,
    title: str = "",
    oracle: Sequence[Row] = (),
) -> Path:
    """Accuracy against effective context (log x): every configuration a point coloured by method, the per-budget
    optimum as a line, and the ``oracle`` rows (the reader given the gold paragraphs, alone and among retrieved
    distractors) as labelled stars beside them; written to `path` (PNG) with matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def placed(row: Row) -> bool:  # scored, with an effective context to stand on the x axis
        return row.acc is not None and bool(row.effective_context_tokens_per_question)

    measured = [r for r in rows if placed(r)]
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for method in sorted({r.method for r in measured}):
        mine = [r for r in measured if r.method == method]
        ax.scatter(
            [r.effective_context() for r in mine],
            [r.acc for r in mine],
            label=method,
            color=f"C{order(method) % 10}",
            alpha=0.75,
            s=28,
        )
    optimum, marks = [], []  # a staircase: each budget's best configuration, held up to the budget
    for budget in sorted(budgets):
        best = best_within(measured, budget)
        if best is not None:
            optimum += [(best.effective_context(), best.acc), (budget, best.acc)]
            marks.append((best.effective_context(), best.acc))
        ax.axvline(budget, color="0.85", linestyle=":", linewidth=1, zorder=0)
    if optimum:
        xs, ys = zip(*sorted(optimum), strict=True)
        ax.plot(xs, ys, color="black", linewidth=1.2, label="per-budget optimum")
        ax.scatter(*zip(*marks, strict=True), color="black", marker="D", s=18, zorder=3)
    for row in filter(placed, oracle):
        ax.scatter(row.effective_context(), row.acc, marker="*", s=90, color="crimson", zorder=3)
        ax.annotate(row.method, (row.effective_context(), row.acc), textcoords="offset points",
                    xytext=(6, -3), fontsize=8, color="crimson")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("effective context length (input tokens of all LM calls per question)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title or "Accuracy vs effective context")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: it hides no point
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fit_allocation(rows: Sequence[Row], budgets: Sequence[int], dataset: str) -> dict[str, Any] | None:
    """Fit the allocation model on the rows of methods whose demonstrations carry documents (the paper's family:
    DRAG with RAG's rows with no shot, IterDRAG, and closed-book, which has none to carry; all methods when only
    the baseline is left), assess
    it at each budget and extrapolate; None when there is too little to fit. Informativeness is read off the
    methods that do not iterate."""
    measured = [r for r in rows if r.acc is not None]
    carriers = {r.method for r in measured if method_named(r.method).demo_documents}
    family = list({id(r): r for m in sorted(carriers) for r in rows_of(m, measured)}.values())  # DRAG's m=0 too
    if not any(method_named(r.method).retrieves for r in family):
        family = measured
    try:
        i = allocation.informativeness([r for r in measured if not method_named(r.method).iterates])
    except ValueError as exc:
        log.warning("no allocation model: %s", exc)
        return None
    if len(family) < 3:
        log.warning("no allocation model: %d measured configurations (need 3)", len(family))
        return None
    model = allocation.fit(allocation.observations(family, i))
    model.informativeness = {dataset: list(i)}
    at_budget = [a for b in sorted(budgets) if (a := allocation.assess(model, family, b, i)) is not None]
    candidates = [r.to_json() for r in family]
    return {
        "model": model.to_json(),
        "dataset": dataset,
        "informativeness": list(i),
        "methods": sorted({r.method for r in family}),
        "at_budget": at_budget,
        "extrapolation": allocation.extrapolation(family, budgets, i),
        "candidates": candidates,
    }


def format_allocation(fitted: Mapping[str, Any]) -> str:
    model = allocation.AllocationModel.from_json(fitted["model"])
    i = fitted["informativeness"]
    lines = [
        f"allocation model on {model.n_points} configurations ({', '.join(fitted['methods'])}): "
        f"R^2 {model.r2:.3f}, MSE {model.mse:.4f} (logit space); i_doc {i[0]:+.3f}, i_shot {i[1]:+.3f}; "
        f"a + b*i = {', '.join(f'{v:+.3f}' for v in model.effective(i))} (docs, shots, iterations), c {model.c:+.3f}"
        + ("" if model.identifiable else " [one dataset: a and b not separable]")
    ]
    for a in fitted["at_budget"]:
        p = a["predicted"]
        label = Point(p["method"], p["docs"], p["shots"], p["iterations"]).label
        lines.append(
            f"  budget {format_size(a['budget'])}: predicted {label}"
            f" Acc {a['predicted_acc']:.1f} = {a['percent_of_best']:.1f}% of the grid's best ({a['best_acc']:.1f})"
        )
    for a in fitted["extrapolation"]:
        lines.append(
            f"  extrapolation: fit <= {format_size(a['fit_budget'])}, predict at {format_size(a['budget'])}: "
            f"{a['percent_of_best']:.1f}% of the best"
        )
    return "\n".join(lines)
