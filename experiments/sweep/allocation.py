"""The computation allocation model of Yue et al. 2024 (arXiv:2410.04343, section 5), fitted on a sweep.

    sigmoid^-1(P(theta)) ~ (a + b * i)^T log(theta) + c

P(theta) is the accuracy of a configuration theta = (documents, shots, iterations); i = (i_doc, i_shot, 0) is the
informativeness of the task, measured as in the paper: the accuracy with 1 document (no shots) minus the accuracy
with neither, and the accuracy with 1 shot (no documents) minus the accuracy with neither. a, b (3-vectors) and c
are fitted by least squares (numpy) in logit space (b's third component multiplies i's 0 and is left at 0).

Our treatment of zeros: the grid has 0 shots, and single-step methods (RAG, DRAG, closed-book) have no
decomposition steps, so every component is taken as log(x + 1) (0 documents, shots or iterations -> 0); IterDRAG's
``max_iterations`` n is its iterations, single-step methods have 0. Accuracies of exactly 0 or 1 are clipped to
[eps, 1 - eps] with eps = 1 / (2 n) for n questions (a continuity correction) before the logit.

With one dataset, i is a constant, so b cannot be told apart from a: least squares then returns the minimum-norm
solution and only a + b * i (reported as ``effective``) is meaningful; ``identifiable`` says whether the design
had full rank (several datasets with different informativeness).

``allocate`` reads a sweep's stored model back and picks its configuration for a budget (``ragscale allocate``).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragscale.experiments.config import ConfigError
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.files import write_json
from ragscale.experiments.sweep.ledger import ALLOCATION
from ragscale.experiments.sweep.rows import Row

THETA = ("docs", "shots", "iterations")


def log_theta(docs: int, shots: int, iterations: int) -> list[float]:
    """The model's features of a configuration: log(x + 1) of each component (see the module docstring)."""
    return [math.log1p(docs), math.log1p(shots), math.log1p(iterations)]


def logit(p: float, eps: float) -> float:
    p = min(max(p, eps), 1 - eps)
    return math.log(p / (1 - p))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@dataclass(frozen=True)
class Observation:
    """One measured configuration: theta, the task's informativeness (i_doc, i_shot), accuracy in [0, 1], n."""

    docs: int
    shots: int
    iterations: int
    informativeness: tuple[float, float]
    accuracy: float
    n: int = 100


@dataclass
class AllocationModel:
    """A fitted model; ``predict(theta, i)`` is the expected accuracy in [0, 1]. Stored as JSON, never pickled."""

    a: list[float]
    b: list[float]
    c: float
    r2: float = float("nan")
    mse: float = float("nan")
    n_points: int = 0
    identifiable: bool = False
    informativeness: dict[str, list[float]] = field(default_factory=dict)  # dataset -> [i_doc, i_shot]

    def effective(self, informativeness: Sequence[float]) -> list[float]:
        """a + b * i: the slope of the logit in each log(theta + 1) for a task with this informativeness."""
        i = [*informativeness[:2], 0.0]
        return [self.a[j] + self.b[j] * i[j] for j in range(3)]

    def predict_logit(self, docs: int, shots: int, iterations: int, informativeness: Sequence[float]) -> float:
        slope = self.effective(informativeness)
        return sum(s * x for s, x in zip(slope, log_theta(docs, shots, iterations), strict=True)) + self.c

    def predict(self, docs: int, shots: int, iterations: int, informativeness: Sequence[float]) -> float:
        return sigmoid(self.predict_logit(docs, shots, iterations, informativeness))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> AllocationModel:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in known})


def fit(observations: Sequence[Observation]) -> AllocationModel:
    """Least-squares fit of the model on observations (needs at least 3); R^2 and MSE are in logit space."""
    if len(observations) < 3:
        raise ValueError(f"the allocation model needs at least 3 measured configurations, got {len(observations)}")
    rows, targets = [], []
    for ob in observations:
        x = log_theta(ob.docs, ob.shots, ob.iterations)
        i = [*ob.informativeness, 0.0]
        rows.append([*x, i[0] * x[0], i[1] * x[1], 1.0])  # i's third component is 0: b's is not fitted
        targets.append(logit(ob.accuracy, 1 / (2 * max(ob.n, 1))))
    design, y = np.asarray(rows), np.asarray(targets)
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    mse = float(np.mean(residual**2))
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1 - float(np.sum(residual**2)) / total if total > 0 else float("nan")
    return AllocationModel(
        a=[float(v) for v in coef[:3]],
        b=[float(coef[3]), float(coef[4]), 0.0],
        c=float(coef[5]),
        r2=r2,
        mse=mse,
        n_points=len(observations),
        identifiable=int(rank) == design.shape[1],
    )


def informativeness(rows: Iterable[Row]) -> tuple[float, float]:
    """(i_doc, i_shot) from sweep rows (acc in percent): accuracy with 1 document and no shot, resp. no document
    and 1 shot, minus the accuracy with neither (closed-book, 0 shots). Raises ValueError naming the missing
    configuration."""
    by_theta: dict[tuple[int, int], float] = {}
    for row in rows:
        if row.iterations == 0 and row.acc is not None:
            by_theta.setdefault((row.docs, row.shots), row.acc / 100)
    needed = {
        (0, 0): "0 documents, 0 shots (closed-book)",
        (1, 0): "1 document, 0 shots",
        (0, 1): "0 documents, 1 shot",
    }
    missing = [text for theta, text in needed.items() if theta not in by_theta]
    if missing:
        raise ValueError(f"informativeness needs the accuracy of: {'; '.join(missing)} (run the sweep with baselines)")
    base = by_theta[(0, 0)]
    return by_theta[(1, 0)] - base, by_theta[(0, 1)] - base


def observations(rows: Iterable[Row], i: tuple[float, float]) -> list[Observation]:
    return [Observation(r.docs, r.shots, r.iterations, i, r.acc / 100, r.n or 1) for r in rows if r.acc is not None]


def predict_best(model: AllocationModel, candidates: Iterable[Row], budget: float, i: Sequence[float]) -> Row | None:
    """The candidate within `budget` (its effective context, measured or else estimated) of highest predicted
    accuracy; None when none fits."""
    within = [c for c in candidates if c.effective_context() <= budget]
    if not within:
        return None
    return max(within, key=lambda c: (model.predict(c.docs, c.shots, c.iterations, i), -c.effective_context()))


def best_measured(rows: Iterable[Row], budget: float) -> Row | None:
    within = [r for r in rows if r.acc is not None and r.effective_context() <= budget]
    return max(within, key=lambda r: (r.acc, r.em or 0, -r.effective_context()), default=None)


def assess(model: AllocationModel, rows: Sequence[Row], budget: float, i: Sequence[float]) -> dict[str, Any] | None:
    """The predicted configuration at `budget`, its measured accuracy, and that as % of the grid's best there."""
    predicted = predict_best(model, rows, budget, i)
    best = best_measured(rows, budget)
    if predicted is None or best is None:
        return None
    ratio = 100 * predicted.acc / best.acc if best.acc else (100.0 if not predicted.acc else 0.0)
    return {
        "budget": budget,
        "predicted": _label(predicted),
        "predicted_acc": predicted.acc,
        "predicted_model_acc": round(100 * model.predict(predicted.docs, predicted.shots, predicted.iterations, i), 2),
        "best": _label(best),
        "best_acc": best.acc,
        "percent_of_best": round(ratio, 1),
    }


def extrapolation(rows: Sequence[Row], budgets: Sequence[float], i: tuple[float, float]) -> list[dict[str, Any]]:
    """The paper's check: fit on configurations within budget B, predict the best configuration at the next budget."""
    checks = []
    ordered = sorted(budgets)
    for low, high in itertools.pairwise(ordered):
        train = [r for r in rows if r.acc is not None and r.effective_context() <= low]
        if len(train) < 3:
            continue
        result = assess(fit(observations(train, i)), rows, high, i)
        if result is not None:
            checks.append({"fit_budget": low, **result})
    return checks


def _label(row: Row) -> dict[str, Any]:
    return {**asdict(row.point), EFFECTIVE_CONTEXT: row.effective_context()}


def save(path: Path, payload: Mapping[str, Any]) -> None:
    write_json(path, payload, indent=2)


def load(path: Path) -> dict[str, Any]:
    """The stored allocation (``allocation.json`` of a sweep); FileNotFoundError names the file and the fix."""
    if not path.exists():
        raise FileNotFoundError(f"no fitted allocation model at {path}: run `ragscale sweep` for this dataset first")
    return json.loads(path.read_text(encoding="utf-8"))


def allocate(sweep_dir: Path, budget: int) -> dict[str, Any]:
    """The configuration the stored model predicts best within ``budget`` (among the sweep's configurations)."""
    path = sweep_dir / ALLOCATION
    try:
        fitted = load(path)
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from exc
    model = AllocationModel.from_json(fitted["model"])
    i = fitted["informativeness"]
    candidates = [Row.from_json(c, source=str(path)) for c in fitted["candidates"]]
    best = predict_best(model, candidates, budget, i)
    if best is None:
        smallest = min(c.effective_context() for c in candidates)
        raise ConfigError(f"no configuration of the sweep fits {budget} tokens (the smallest needs {smallest:,.0f})")
    return {
        "budget": budget,
        "method": best.method,
        "docs": best.docs,
        "shots": best.shots,
        "iterations": best.iterations,
        EFFECTIVE_CONTEXT: best.effective_context(),
        "predicted_acc": round(100 * model.predict(best.docs, best.shots, best.iterations, i), 2),
        "measured_acc": best.acc,
        "r2": model.r2,
    }
