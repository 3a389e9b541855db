"""Inference scaling, measured: a budget sweep over documents, shots and iterations (Yue et al. 2024, arXiv:2410.04343).

A sweep is a grid of configurations theta = (documents k, shots m, iterations n) per method (iterations apply to
IterDRAG only; single-step methods have n = 0), plus two baselines for the allocation model's informativeness
(closed-book with 0 and with 1 shot). In order:

1. **Estimate.** Each configuration's effective context (all input tokens of all LM calls for one question) is
   estimated before it runs (``estimate.py``): its calls rendered through the real adapter and the LM's chat
   template and counted with the LM's tokenizer on the run's first 20 questions, calibrated on the finished
   configurations of the same method and shot count in this sweep, else a bound (IterDRAG) or a counted floor. The
   sweep re-estimates each configuration just before running it, with what the ones before it taught, and keeps that
   estimate with its result. A configuration is skipped only when it cannot fit: even its fewest tokens (IterDRAG
   stopping at its first decomposition, every reply read at once) exceed the largest budget, or its longest call,
   every iteration used, exceeds the LM's context window.
2. **Plan.** Time per configuration = questions x (input tokens / prefill rate + output tokens / decode rate),
   with rates fitted on earlier runs of this LM in the ledger when there are some, else measured by two tiny
   timed calls (`measure_speed`).
3. **Run.** Shots are demonstrations learned by the teleprompter, compiled once per method and shot count (with the
   largest document count of the grid, and IterDRAG's largest iteration count) and reused across document and
   iteration counts (`run_experiment(compiled=...)`, demos cut to the configuration's k documents each, as DRAG's
   demonstrations carry as many documents as the test question). Each configuration is one MLflow child run
   under a parent sweep run (`kind="sweep"`). Finished configurations are keyed by a hash of the configuration
   and the data, kept in ``ledger.json`` in the sweep directory and tagged on their MLflow run: a rerun skips them.
4. **Results.** Per budget, the best configuration per method and overall (highest Acc, then EM, then fewer
   tokens; the paper's Table 1 shape) with EM/F1/Acc; a plot of accuracy against effective context (log x);
   the allocation model (``allocation.py``) fitted and stored as ``allocation.json``.

Budgets are in tokens, "k" = 1,000. A configuration belongs to budget B when its measured effective context is
at most B.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ragscale.experiments import allocation, tracking
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.estimate import BASELINE, Estimate, Planner, estimate_fields, run_records

log = logging.getLogger(__name__)

SWEEP_METHODS = ("rag", "drag", "iterdrag")
SWEEP_KEY_TAG = "ragscale.sweep_key"
ESTIMATE_TAG = "ragscale.sweep_estimate"  # the estimate made just before the configuration ran, as JSON
LEDGER = "ledger.json"
RESULTS = "results.json"
TABLE = "table.md"
PLOT = "accuracy_vs_context.png"
ALLOCATION = "allocation.json"
PLAN = "plan.md"

# The default grid: chosen by estimate to finish within an hour on a 2-core CPU with smollm2-135m (see README).
DEFAULT_METHODS = ("rag", "drag", "iterdrag")
DEFAULT_DOCS = (1, 2, 4)
DEFAULT_SHOTS = (0, 1)
DEFAULT_ITERATIONS = (1,)
DEFAULT_BUDGETS = (500, 1000, 2000, 4000)
DEFAULT_LIMIT = 20


def parse_size(text: str) -> int:
    """ "16k" -> 16000, "1m" -> 1000000, "800" -> 800."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text)
    if not match:
        raise ConfigError(f"budget {text!r} is not a token count such as 800, 2k or 1m")
    scale = {"": 1, "k": 1000, "m": 1_000_000}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


def format_size(tokens: float) -> str:
    return f"{tokens / 1000:g}k" if tokens >= 1000 and tokens % 1000 == 0 else f"{tokens:g}"


def parse_ints(text: str, name: str, low: int = 0) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError as exc:
        raise ConfigError(f"--{name} {text!r}: expected comma-separated integers such as 1,2,5") from exc
    if not values or values[0] < low:
        raise ConfigError(f"--{name} {text!r}: expected integers >= {low}")
    return values


@dataclass(frozen=True)
class Grid:
    """What a sweep varies. `baselines` adds closed-book with 0 and 1 shots (the model's informativeness)."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    docs: tuple[int, ...] = DEFAULT_DOCS
    shots: tuple[int, ...] = DEFAULT_SHOTS
    iterations: tuple[int, ...] = DEFAULT_ITERATIONS
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    baselines: bool = True

    def __post_init__(self) -> None:
        for method in self.methods:
            if method not in (*SWEEP_METHODS, BASELINE):
                raise ConfigError(f"unknown sweep method {method!r}; valid choices: {', '.join(SWEEP_METHODS)}")
        if not self.budgets:
            raise ConfigError("a sweep needs at least one budget")


@dataclass(frozen=True)
class Point:
    """One configuration of the grid; `iterations` is 0 for single-step methods, `docs` 0 for closed-book."""

    method: str
    docs: int
    shots: int
    iterations: int = 0

    @property
    def label(self) -> str:
        text = f"{self.method} k={self.docs} m={self.shots}"
        return text + (f" n={self.iterations}" if self.method == "iterdrag" else "")


def grid_points(grid: Grid) -> list[Point]:
    points = []
    if grid.baselines:
        points += [Point(BASELINE, 0, shots) for shots in (0, 1)]
    for method in grid.methods:
        iterations = grid.iterations if method == "iterdrag" else (0,)
        docs = (0,) if method == BASELINE else grid.docs
        points += [Point(method, k, m, n) for k, m, n in itertools.product(docs, grid.shots, iterations)]
    return list(dict.fromkeys(points))


def point_config(base: RunConfig, point: Point, *, docs_per_demo: int | None = None) -> RunConfig:
    """The run config of a point: k documents, m demonstrations of k documents each (or `docs_per_demo`)."""
    return replace(
        base,
        method=point.method,
        k=max(point.docs, 1),
        max_demos=point.shots,
        max_docs_per_demo=docs_per_demo if docs_per_demo is not None else point.docs,
        max_iterations=max(point.iterations, 1),
        optimizer=base.optimizer if point.shots else "none",
        run_name=None,
    )


# --- speed ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Speed:
    prefill_tok_s: float
    decode_tok_s: float
    source: str

    def seconds(self, input_tokens: float, output_tokens: float) -> float:
        return input_tokens / self.prefill_tok_s + output_tokens / self.decode_tok_s


def measure_speed(lm, text: str) -> Speed:
    """Prefill and decode rates from two tiny timed calls (cache off): a ~300-token prompt with 1 output token,
    then a short prompt with up to 24 output tokens."""
    from ragscale.programs.lm import meter

    fresh = lm.copy(cache=False) if hasattr(lm, "copy") else lm
    words = " ".join((text or "the quick brown fox jumps over the lazy dog ").split()[:220])
    stamp = f"[{time.time_ns()}] "  # a new prompt each time: no prefix cache either
    fresh(messages=[{"role": "user", "content": stamp + "hi"}], max_tokens=1)  # warm-up
    with meter() as usage:
        start = time.perf_counter()
        fresh(messages=[{"role": "user", "content": stamp + words}], max_tokens=1)
        prefill_s = time.perf_counter() - start
    prefill = max(usage.input_tokens, 1) / max(prefill_s, 1e-6)
    with meter() as usage:
        start = time.perf_counter()
        fresh(messages=[{"role": "user", "content": stamp + "Write a long story about a cat."}], max_tokens=24)
        total_s = time.perf_counter() - start
    decode_s = max(total_s - usage.input_tokens / prefill, 1e-3)
    decode = max(usage.output_tokens, 1) / decode_s
    return Speed(round(prefill, 1), round(decode, 2), "timed calls")


def speed_from_runs(rows: Iterable[Mapping[str, Any]], lm_name: str) -> Speed | None:
    """Rates fitted (non-negative least squares on seconds per question) on earlier ledger rows of this LM."""
    import numpy as np

    usable = [
        r
        for r in rows
        if r.get("lm") == lm_name and r.get("n") and r.get("effective_tokens") is not None
        and (r.get("eval_s") or 0) >= 0.2 * r["n"]  # faster than that: served from the LM cache, not a timing
    ]  # fmt: skip
    if len(usable) < 3:
        return None
    design = np.asarray([[r["effective_tokens"], r.get("output_tokens") or 0.0] for r in usable])
    target = np.asarray([r["eval_s"] / r["n"] for r in usable])
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    if coef[0] <= 0 or coef[1] <= 0:
        rate = float(design[:, 0].sum() / target.sum())  # one rate for all tokens, outputs folded in
        return Speed(round(rate, 1), float("inf"), f"{len(usable)} earlier runs (one rate)")
    return Speed(round(1 / coef[0], 1), round(1 / coef[1], 2), f"{len(usable)} earlier runs")


# --- keys, ledger -----------------------------------------------------------------------------------------------


def data_fingerprint(train: Sequence, evalset: Sequence) -> str:
    digest = hashlib.sha256()
    for split, examples in (("train", train), ("eval", evalset)):
        for ex in examples:
            digest.update(json.dumps([split, str(ex.id), ex.question, list(ex.answers)], ensure_ascii=False).encode())
    return digest.hexdigest()[:16]


KEY_FIELDS = (
    "method", "dataset", "optimizer", "lm", "api_base", "adapter", "max_tokens", "retriever", "k", "max_iterations",
    "max_demos", "max_docs_per_demo", "metric", "limit", "train_limit", "seed",
)  # fmt: skip


def config_key(config: RunConfig, fingerprint: str) -> str:
    """A hash of what determines a configuration's result: its settings and the data."""
    values = {name: getattr(config, name) for name in KEY_FIELDS}
    text = json.dumps({**values, "data": fingerprint}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def sweep_dir_for(runs_dir: Path, dataset: str, lm: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", lm.rstrip("/").rsplit("/", 1)[-1]).strip("-")[:48]
    return Path(runs_dir).resolve() / "sweeps" / f"{dataset}-{slug}"


def load_ledger(sweep_dir: Path) -> dict[str, dict]:
    path = sweep_dir / LEDGER
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); delete it to rerun every configuration") from exc


def save_ledger(sweep_dir: Path, ledger: Mapping[str, dict]) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    tmp = sweep_dir / (LEDGER + ".tmp")
    tmp.write_text(json.dumps(ledger, indent=1) + "\n", encoding="utf-8")
    tmp.replace(sweep_dir / LEDGER)


def mlflow_rows(runs_dir: Path) -> dict[str, dict]:
    """Finished child runs tagged with a sweep key, as ledger rows by key (for a ledger that lost them)."""
    rows: dict[str, dict] = {}
    for run in tracking.finished_runs(runs_dir, kind="run"):
        key = run.data.tags.get(SWEEP_KEY_TAG)
        if key is None:
            continue
        metrics = run.data.metrics
        rows[key] = {
            "run_id": run.info.run_id,
            "lm": run.data.tags.get("lm"),
            "em": metrics.get("em"),
            "f1": metrics.get("f1"),
            "acc": metrics.get("acc"),
            "n": int(metrics.get("n", 0)),
            "failed": int(metrics.get("failed", 0)),
            "effective_tokens": metrics.get("effective_context_tokens_per_question"),
            "output_tokens": metrics.get("output_tokens_per_question"),
            "lm_calls": metrics.get("lm_calls_per_question"),
            "eval_s": metrics.get("eval_s"),
            "wall_s": metrics.get("wall_s"),
            **json.loads(run.data.tags.get(ESTIMATE_TAG, "{}")),
        }
    return rows


# --- planning ---------------------------------------------------------------------------------------------------


@dataclass
class PlannedPoint:
    point: Point
    key: str
    docs_per_demo: int
    estimate: Estimate
    seconds: float
    status: str  # "run", "done", "over budget", "over context window"

    def row(self) -> dict[str, Any]:
        return {
            **asdict(self.point),
            "key": self.key,
            "estimated_tokens": round(self.estimate.tokens, 1),
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
    tracked: Mapping[str, dict] | None = None,
    retriever=None,
    planner: Planner | None = None,
) -> list[PlannedPoint]:
    """Every grid point with its key, estimated effective context and time, and whether it will run ("done" when
    its key is in the ledger or in `tracked`, the sweep-tagged MLflow runs, whose per-question records calibrate
    the estimates of their method). A point is skipped as "over budget" only when it cannot fit: even its fewest
    tokens (`Estimate.low`) exceed the largest budget; as "over context window" when its longest call, every
    iteration used, exceeds the LM's context window (the check the runner makes before running it)."""
    from ragscale.programs.lm import context_window

    if planner is None:
        planner = Planner.for_run(base, lm, train, evalset, retriever=retriever, speed=speed)
    fingerprint = data_fingerprint(train, evalset)
    window = context_window(lm)
    finished = {**(tracked or {}), **ledger}
    points = []
    for point in grid_points(grid):
        config = point_config(base, point, docs_per_demo=docs_per_demo)
        key = config_key(config, fingerprint)
        points.append((point, key, config.max_docs_per_demo))
        if key in finished:
            planner.learn(point, config.max_docs_per_demo, run_records(base.runs_dir, finished[key]["run_id"]))
    planned = []
    for point, key, per_demo in points:
        estimate, seconds = planner.estimate(point, per_demo)
        if key in finished:
            status = "done"
        elif estimate.low > max(grid.budgets):
            status = "over budget"
        elif estimate.longest_call > window:
            status = "over context window"
        else:
            status = "run"
        planned.append(PlannedPoint(point, key, per_demo, estimate, seconds, status))
    return planned


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
    speed_text = (
        f"prefill {speed.prefill_tok_s:g} tok/s, decode {speed.decode_tok_s:g} tok/s ({speed.source})"
        if speed
        else "speed not measured"
    )
    lines.append("")
    lines.append(
        "estimate: calibrated = learned from this sweep's finished configurations of the same method and shots (how "
        "often IterDRAG asks another follow-up, the follow-ups it asked, adapter retries); follow-ups = IterDRAG's "
        "follow-ups learned from other shot counts, retries not yet; bound = IterDRAG at every iteration (nothing "
        "learned yet); counted = each call once (a floor: retries add). fewest-most: without retries, IterDRAG "
        "stopping at its first decomposition to every iteration used; over budget = even the fewest exceed the "
        "largest budget."
    )
    lines.append(
        f"{len(todo)} to run, {sum(p.status == 'done' for p in planned)} done, "
        f"{sum(p.status.startswith('over') for p in planned)} skipped; {n_questions} questions each; "
        f"estimated {total / 60:.1f} min of LM time ({speed_text}); plus loading, indexing and compiling"
    )
    return "\n".join(lines)


# --- results ----------------------------------------------------------------------------------------------------


def _rank(row: Mapping[str, Any]) -> tuple:
    return (row["acc"], row["em"], row["f1"], -allocation.tokens_of(row))


def budget_table(rows: Sequence[Mapping[str, Any]], budgets: Sequence[int]) -> list[dict[str, Any]]:
    """Per budget, the best configuration per method and overall (the paper's Table 1 shape)."""
    table = []
    measured = [r for r in rows if r.get("acc") is not None and r.get("effective_tokens") is not None]
    for budget in sorted(budgets):
        within = [r for r in measured if r["effective_tokens"] <= budget]
        methods = sorted({r["method"] for r in within}, key=lambda m: (m != BASELINE, m))
        for method in [*methods, "best"]:
            pool = within if method == "best" else [r for r in within if r["method"] == method]
            if not pool:
                continue
            best = max(pool, key=_rank)
            table.append(
                {
                    "budget": budget,
                    "method": method,
                    "config": Point(best["method"], best["docs"], best["shots"], best["iterations"]).label,
                    "em": best["em"],
                    "f1": best["f1"],
                    "acc": best["acc"],
                    "effective_tokens": best["effective_tokens"],
                }
            )
    return table


def format_table(table: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| budget | method | best configuration | EM | F1 | Acc | tokens/question |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in table:
        name = f"**{r['method']}**" if r["method"] == "best" else r["method"]
        lines.append(
            f"| {format_size(r['budget'])} | {name} | {r['config']} | {r['em']:.1f} | {r['f1']:.1f} | {r['acc']:.1f} "
            f"| {r['effective_tokens']:,.0f} |"
        )
    return "\n".join(lines)


COLOURS = {"closed-book": "tab:gray", "rag": "tab:blue", "drag": "tab:orange", "iterdrag": "tab:green"}


def plot(rows: Sequence[Mapping[str, Any]], budgets: Sequence[int], path: Path, *, title: str = "") -> Path:
    """Accuracy against effective context (log x): every configuration a point coloured by method, the per-budget
    optimum as a line; written to `path` (PNG) with matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r.get("acc") is not None and r.get("effective_tokens")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in sorted({r["method"] for r in measured}):
        mine = [r for r in measured if r["method"] == method]
        ax.scatter(
            [r["effective_tokens"] for r in mine],
            [r["acc"] for r in mine],
            label=method,
            color=COLOURS.get(method),
            alpha=0.75,
            s=28,
        )
    optimum, marks = [], []  # a staircase: each budget's best configuration, held up to the budget
    for budget in sorted(budgets):
        within = [r for r in measured if r["effective_tokens"] <= budget]
        if within:
            best = max(within, key=_rank)
            optimum += [(best["effective_tokens"], best["acc"]), (budget, best["acc"])]
            marks.append((best["effective_tokens"], best["acc"]))
        ax.axvline(budget, color="0.85", linestyle=":", linewidth=1, zorder=0)
    if optimum:
        xs, ys = zip(*sorted(optimum), strict=True)
        ax.plot(xs, ys, color="black", linewidth=1.2, label="per-budget optimum")
        ax.scatter(*zip(*marks, strict=True), color="black", marker="D", s=18, zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("effective context length (input tokens of all LM calls per question)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title or "Accuracy vs effective context")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


FIT_METHODS = ("closed-book", "drag", "iterdrag")


def fit_allocation(rows: Sequence[Mapping[str, Any]], budgets: Sequence[int], dataset: str) -> dict[str, Any] | None:
    """Fit the allocation model on the sweep's DRAG/IterDRAG/closed-book rows (the paper's family; all methods when
    those are missing), assess it at each budget and extrapolate; None when there is too little to fit."""
    measured = [r for r in rows if r.get("acc") is not None]
    family = [r for r in measured if r["method"] in FIT_METHODS]
    if not any(r["method"] != BASELINE for r in family):
        family = measured
    try:
        i = allocation.informativeness(
            [r for r in measured if r["method"] in (BASELINE, "drag", "rag") and r["iterations"] == 0]
        )
    except ValueError as exc:
        log.warning("no allocation model: %s", exc)
        return None
    if len(family) < 3:
        log.warning("no allocation model: %d measured configurations (need 3)", len(family))
        return None
    model = allocation.fit(allocation.observations(family, i))
    model.informativeness = {dataset: list(i)}
    at_budget = [a for b in sorted(budgets) if (a := allocation.assess(model, family, b, i)) is not None]
    candidates = [
        {k: r[k] for k in ("method", "docs", "shots", "iterations", "estimated_tokens", "effective_tokens", "acc")}
        for r in family
    ]
    return {
        "model": model.to_json(),
        "dataset": dataset,
        "informativeness": list(i),
        "methods": sorted({r["method"] for r in family}),
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


# --- running ----------------------------------------------------------------------------------------------------


@dataclass
class SweepResult:
    sweep_dir: Path
    parent_run_id: str | None
    ran: list[str]
    skipped: list[str]
    failed: list[str]
    rows: list[dict]
    table: list[dict]
    allocation: dict | None
    plot_path: Path | None
    plan: list[PlannedPoint]


def _compile(base: RunConfig, point: Point, grid: Grid, *, lm, retriever, train: Sequence, docs_per_demo: int | None):
    """Compile `point.method` with `point.shots` demos once, with the grid's largest k (and n for IterDRAG)."""
    import dspy

    from ragscale.experiments.runner import build_program, compile_for, make_adapter

    widest = Point(point.method, max(grid.docs), point.shots, max(grid.iterations) if point.method == "iterdrag" else 0)
    config = point_config(base, widest, docs_per_demo=docs_per_demo)
    adapter = make_adapter(base.adapter)
    with dspy.context(lm=lm, adapter=adapter):
        program = build_program(config, retriever)
        return compile_for(config, program, train, lm, adapter)


def run_sweep(
    grid: Grid,
    base: RunConfig,
    *,
    lm=None,
    retriever=None,
    examples: tuple[Sequence, Sequence] | None = None,
    sweep_dir: Path | None = None,
    docs_per_demo: int | None = None,
    speed: Speed | None = None,
    progress: bool = True,
    report: Callable[[str], None] = log.info,
) -> SweepResult:
    """Plan, run what is not done yet, and summarise; see the module docstring. `report` receives the plan, the
    table and the allocation summary as text (the CLI prints them)."""
    from ragscale.experiments.runner import load_examples, load_lm_for, run_experiment
    from ragscale.optimizers.teleprompters import ContextWindowError, cap_demos

    if lm is None:
        lm = load_lm_for(base)
    train, evalset = load_examples(base) if examples is None else (list(examples[0]), list(examples[1]))
    train = train[: base.train_limit] if base.train_limit else train
    evalset = evalset[: base.limit] if base.limit else evalset
    sweep_dir = sweep_dir or sweep_dir_for(base.runs_dir, base.dataset, base.lm)
    if retriever is None and any(m != BASELINE for m in grid.methods):
        # Built before planning: the estimate counts the documents it really retrieves (the index is cached).
        from ragscale.data import build_corpus
        from ragscale.programs.retrieval import build_retriever

        corpus = build_corpus(list(train) + list(evalset))
        report(f"indexing {len(corpus)} passages ({base.retriever}; cached under {base.runs_dir / 'indexes'})")
        retriever = build_retriever(
            corpus, kind=base.retriever, index_dir=base.runs_dir / "indexes", chroma_url=base.chroma_url
        )
    ledger = load_ledger(sweep_dir)
    tracked = mlflow_rows(base.runs_dir)
    if speed is None:
        speed = speed_from_runs({**tracked, **ledger}.values(), base.lm)
    if speed is None:
        speed = measure_speed(
            lm, next((p["text"] for ex in evalset for p in (getattr(ex, "paragraphs", None) or [])), "")
        )
    planner = Planner.for_run(base, lm, train, evalset, retriever=retriever, speed=speed)
    planned = plan(
        grid, base, lm=lm, train=train, evalset=evalset, ledger=ledger, speed=speed, docs_per_demo=docs_per_demo,
        tracked=tracked, retriever=retriever, planner=planner,
    )  # fmt: skip
    report(format_plan(planned, speed, len(evalset)))
    fingerprint = data_fingerprint(train, evalset)

    parent = tracking.start_run(
        base.runs_dir,
        run_name=f"sweep-{sweep_dir.name}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}",
        params={
            **{f"grid.{k}": ",".join(map(str, v)) if isinstance(v, tuple) else str(v) for k, v in asdict(grid).items()},
            **{f"base.{k}": v for k, v in base.to_params().items()},
            "data_fingerprint": fingerprint,
            "docs_per_demo": str(docs_per_demo),
        },
        tags={"dataset": base.dataset, "lm": base.lm},
        kind="sweep",
    )
    ran, failed = [], []
    compiled: dict[tuple[str, int], Any] = {}
    try:
        todo = [p for p in planned if p.status == "run"]
        for number, item in enumerate(todo, start=1):
            point = item.point
            config = point_config(base, point, docs_per_demo=docs_per_demo)
            config = replace(config, run_name=f"{sweep_dir.name}-{point.label.replace(' ', '-').replace('=', '')}")
            # Re-estimated with what the configurations of its method finished so far in this sweep taught.
            item.estimate, item.seconds = planner.estimate(point, item.docs_per_demo)
            report(
                f"[{number}/{len(todo)}] {point.label}: estimated {item.estimate.tokens:,.0f} tokens/question "
                f"({item.estimate.basis})"
            )
            try:
                program = None
                if point.shots:
                    if (point.method, point.shots) not in compiled:
                        compiled[point.method, point.shots] = _compile(
                            base, point, grid, lm=lm, retriever=retriever, train=train, docs_per_demo=docs_per_demo
                        )
                    program = cap_demos(
                        copy.deepcopy(compiled[point.method, point.shots]), point.shots, config.max_docs_per_demo
                    )
                summary = run_experiment(
                    config,
                    lm=lm,
                    retriever=retriever,
                    examples=(train, evalset),
                    parent_run_id=parent,
                    progress=progress,
                    check_context=True,
                    compiled=program,
                )
            except ContextWindowError as exc:
                report(f"  skipped, does not fit: {exc}")
                failed.append(item.key)
                continue
            except Exception as exc:  # one configuration failing does not stop the sweep; a rerun retries it
                log.exception("configuration %s failed", point.label)
                report(f"  failed: {type(exc).__name__}: {exc}")
                failed.append(item.key)
                continue
            mlflow_client = tracking.client(base.runs_dir)
            mlflow_client.set_tag(summary["mlflow_run_id"], SWEEP_KEY_TAG, item.key)
            mlflow_client.set_tag(summary["mlflow_run_id"], ESTIMATE_TAG, json.dumps(estimate_fields(item.estimate)))
            planner.learn(point, item.docs_per_demo, run_records(base.runs_dir, summary["mlflow_run_id"]))
            n = summary["n"]
            ledger[item.key] = {
                "run_id": summary["mlflow_run_id"],
                "lm": base.lm,
                "em": summary["em"],
                "f1": summary["f1"],
                "acc": summary["acc"],
                "n": n,
                "failed": summary["failed"],
                "effective_tokens": summary["input_tokens_per_question"],
                "output_tokens": summary["output_tokens_per_question"],
                "lm_calls": summary["lm_calls_per_question"],
                "eval_s": round(60 * n / summary["questions_per_minute"], 2)
                if summary["questions_per_minute"]
                else None,
                "wall_s": summary["wall_s"],
                **estimate_fields(item.estimate),
            }
            save_ledger(sweep_dir, ledger)
            ran.append(item.key)
            report(
                f"  EM {summary['em']:.1f} F1 {summary['f1']:.1f} Acc {summary['acc']:.1f}; "
                f"{summary['input_tokens_per_question']:,.0f} tokens/question measured; {summary['wall_s']:.0f} s"
            )

        rows = []
        for item in planned:
            found = ledger.get(item.key) or tracked.get(item.key)
            if found is not None:
                row = {**item.row(), **found, "lm": base.lm}
                if "estimate_basis" not in found:  # ran before estimates were kept: this one was made after it ran
                    row["estimate_basis"] += ", made after it ran"
                rows.append(row)
        table = budget_table(rows, grid.budgets)
        fitted = fit_allocation(rows, grid.budgets, base.dataset)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / RESULTS).write_text(json.dumps({"grid": asdict(grid), "rows": rows, "table": table}, indent=1))
        (sweep_dir / TABLE).write_text(format_table(table) + "\n", encoding="utf-8")
        (sweep_dir / PLAN).write_text(format_plan(planned, speed, len(evalset)) + "\n", encoding="utf-8")
        artifacts = [sweep_dir / RESULTS, sweep_dir / TABLE, sweep_dir / PLAN]
        plot_path = None
        if rows:
            plot_path = plot(rows, grid.budgets, sweep_dir / PLOT, title=f"{base.dataset}, {base.lm}, {len(evalset)} q")
            artifacts.append(plot_path)
        if fitted is not None:
            allocation.save(sweep_dir / ALLOCATION, fitted)
            artifacts.append(sweep_dir / ALLOCATION)
        report(format_table(table))
        if fitted is not None:
            report(format_allocation(fitted))
        metrics: dict[str, float | None] = {"configurations_run": len(ran), "configurations_failed": len(failed)}
        for r in table:
            metrics[f"acc_{r['method']}_{format_size(r['budget'])}"] = r["acc"]
            metrics[f"em_{r['method']}_{format_size(r['budget'])}"] = r["em"]
            metrics[f"f1_{r['method']}_{format_size(r['budget'])}"] = r["f1"]
        if fitted is not None:
            metrics["allocation_r2"] = fitted["model"]["r2"]
            metrics["allocation_mse"] = fitted["model"]["mse"]
        tracking.log_metrics(base.runs_dir, parent, metrics)
        tracking.log_artifacts(base.runs_dir, parent, artifacts)
    except BaseException as exc:
        tracking.end_run(base.runs_dir, parent, status="KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise
    tracking.end_run(base.runs_dir, parent)  # failed configurations are counted in its metrics and retried on rerun
    skipped = [p.key for p in planned if p.status != "run"]
    return SweepResult(sweep_dir, parent, ran, skipped, failed, rows, table, fitted, plot_path, planned)


def plan_only(
    grid: Grid, base: RunConfig, *, lm=None, docs_per_demo: int | None = None, report: Callable[[str], None] = log.info
) -> list[PlannedPoint]:
    """The plan alone: loads the LM (for its tokenizer and, without earlier runs, two tiny timed calls) and the
    data; builds no persistent index (documents are counted from an in-memory BM25 retriever standing in for the
    configured one), compiles nothing, opens no MLflow run."""
    from ragscale.experiments.runner import load_examples, load_lm_for

    start = time.perf_counter()
    if lm is None:
        lm = load_lm_for(base)
    load_s = time.perf_counter() - start
    train, evalset = load_examples(base)
    sweep_dir = sweep_dir_for(base.runs_dir, base.dataset, base.lm)
    ledger = load_ledger(sweep_dir)
    tracked = mlflow_rows(base.runs_dir)
    speed = speed_from_runs({**tracked, **ledger}.values(), base.lm)
    if speed is None:
        text = next((p["text"] for ex in evalset for p in (getattr(ex, "paragraphs", None) or [])), "")
        speed = measure_speed(lm, text)
    from ragscale.data import build_corpus
    from ragscale.programs.retrieval import BM25Retriever

    stand_in = BM25Retriever(build_corpus(list(train) + list(evalset)))  # in memory, well under a second
    planned = plan(
        grid, base, lm=lm, train=train, evalset=evalset, ledger=ledger, speed=speed, docs_per_demo=docs_per_demo,
        tracked=tracked, retriever=stand_in,
    )  # fmt: skip
    report(format_plan(planned, speed, len(evalset)) + f"\n(model loaded in {load_s:.0f} s)")
    return planned


def allocate(sweep_dir: Path, budget: int) -> dict[str, Any]:
    """The configuration the stored model predicts best within `budget` (among the sweep's configurations)."""
    fitted = allocation.load(sweep_dir / ALLOCATION)
    model = allocation.AllocationModel.from_json(fitted["model"])
    i = fitted["informativeness"]
    best = allocation.predict_best(model, fitted["candidates"], budget, i)
    if best is None:
        smallest = min(allocation.tokens_of(c) for c in fitted["candidates"])
        raise ConfigError(f"no configuration of the sweep fits {budget} tokens (the smallest needs {smallest:,.0f})")
    return {
        "budget": budget,
        "method": best["method"],
        "docs": best["docs"],
        "shots": best["shots"],
        "iterations": best["iterations"],
        "tokens_per_question": allocation.tokens_of(best),
        "predicted_acc": round(100 * model.predict(best["docs"], best["shots"], best["iterations"], i), 2),
        "measured_acc": best.get("acc"),
        "r2": model.r2,
    }


# --- command line (`ragscale sweep`, `ragscale allocate`; wired in cli.py) --------------------------------------


def add_sweep_parser(subparsers) -> None:
    from ragscale.data import DATASETS
    from ragscale.optimizers.teleprompters import OPTIMIZERS
    from ragscale.programs.retrieval import RETRIEVERS

    sweep = subparsers.add_parser(
        "sweep",
        help="budget sweep over documents, shots and iterations: table, plot and allocation model",
        description="Defaults are the grid that fits an hour on a 2-core CPU with smollm2-135m; the paper's grid is "
        "--docs 1,2,5,10,20 --shots 0,1,2,4,8 --iterations 1,2,3 --budgets 2k,4k,8k,16k (for a GPU or a server).",
    )
    sweep.add_argument("--dataset", required=True, choices=list(DATASETS))
    sweep.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated: rag,drag,iterdrag")
    sweep.add_argument("--docs", default=",".join(map(str, DEFAULT_DOCS)), help="documents k per question")
    sweep.add_argument("--shots", default=",".join(map(str, DEFAULT_SHOTS)), help="demonstrations m (learned)")
    sweep.add_argument("--iterations", default=",".join(map(str, DEFAULT_ITERATIONS)), help="IterDRAG steps n")
    sweep.add_argument(
        "--budgets", default=",".join(map(format_size, DEFAULT_BUDGETS)), help="effective-context budgets, e.g. 2k,4k"
    )
    sweep.add_argument("--lm", default="smollm2-135m", help="a preset, model dir, .gguf, or openai/<model>")
    sweep.add_argument("--api-base", dest="api_base", help="URL of an OpenAI-compatible server")
    sweep.add_argument("--adapter", choices=("field", "chat", "json"), default="field")
    sweep.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help=f"dev questions (default: {DEFAULT_LIMIT})")
    sweep.add_argument("--train-limit", dest="train_limit", type=int, default=64, help="train questions for demos")
    sweep.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="labeled", help="teleprompter for shots")
    sweep.add_argument(
        "--docs-per-demo", dest="docs_per_demo", type=int, help="documents per demonstration (default: k, the paper's)"
    )
    sweep.add_argument("--retriever", choices=RETRIEVERS, default="hybrid")
    sweep.add_argument("--data-dir", dest="data_dir", type=Path)
    sweep.add_argument("--runs-dir", dest="runs_dir", type=Path, default=Path("runs"))
    sweep.add_argument("--threads", type=int, default=4)
    sweep.add_argument("--no-baselines", dest="baselines", action="store_false", help="no closed-book runs (no model)")
    sweep.add_argument("--plan-only", dest="plan_only", action="store_true", help="print the plan; run nothing")
    sweep.add_argument("--no-progress", dest="progress", action="store_false")
    sweep.add_argument("--json", dest="json_path", type=Path, help="also write the table and the model as JSON")
    sweep.set_defaults(func=cmd_sweep)


def _grid_and_base(args) -> tuple[Grid, RunConfig]:
    budgets = tuple(sorted({parse_size(b) for b in args.budgets.split(",") if b.strip()}))
    grid = Grid(
        methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()),
        docs=parse_ints(args.docs, "docs", 1),
        shots=parse_ints(args.shots, "shots", 0),
        iterations=parse_ints(args.iterations, "iterations", 1),
        budgets=budgets,
        baselines=args.baselines,
    )
    base = RunConfig(
        method="rag",
        dataset=args.dataset,
        optimizer=args.optimizer,
        lm=args.lm,
        api_base=args.api_base,
        adapter=args.adapter,
        retriever=args.retriever,
        limit=args.limit,
        train_limit=args.train_limit,
        data_dir=args.data_dir,
        runs_dir=args.runs_dir,
        threads=args.threads,
    )
    return grid, base


def cmd_sweep(args, parser) -> int:
    grid, base = _grid_and_base(args)
    if args.plan_only:
        plan_only(grid, base, docs_per_demo=args.docs_per_demo, report=print)
        return 0
    start = time.perf_counter()
    result = run_sweep(grid, base, docs_per_demo=args.docs_per_demo, progress=args.progress, report=print)
    print(
        f"\nsweep: {len(result.ran)} ran, {len(result.skipped)} skipped (done or over budget), {len(result.failed)} "
        f"failed in {time.perf_counter() - start:.0f} s; files in {result.sweep_dir}; parent run {result.parent_run_id}"
    )
    if args.json_path is not None:
        payload = {"table": result.table, "rows": result.rows, "allocation": result.allocation}
        args.json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 1 if result.failed else 0


def add_allocate_parser(subparsers) -> None:
    from ragscale.data import DATASETS

    allocate_cmd = subparsers.add_parser(
        "allocate", help="the configuration the sweep's fitted allocation model predicts best for a budget"
    )
    allocate_cmd.add_argument("--budget", required=True, help="effective-context budget, e.g. 8k")
    allocate_cmd.add_argument("--dataset", required=True, choices=list(DATASETS))
    allocate_cmd.add_argument("--lm", default="smollm2-135m", help="the LM the sweep ran with")
    allocate_cmd.add_argument("--runs-dir", dest="runs_dir", type=Path, default=Path("runs"))
    allocate_cmd.set_defaults(func=cmd_allocate)


def cmd_allocate(args, parser) -> int:
    sweep_dir = sweep_dir_for(args.runs_dir, args.dataset, args.lm)
    try:
        choice = allocate(sweep_dir, parse_size(args.budget))
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from exc
    print(json.dumps(choice, indent=2))
    return 0
