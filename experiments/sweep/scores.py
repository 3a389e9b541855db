"""Each question's EM in every run of a sweep, kept beside its results so that its claims can be checked again.

The paper's claims (``claims.check_claims``) are paired comparisons over the sweep's questions; their inputs are the
runs' per-question records, which live in the runs' work folders and MLflow artifacts. ``collect`` reads them once and
the sweep writes them to ``scores.json`` in its folder (run id -> question id -> EM in percent, the primary metric of
the claims), beside ``results.json`` (the rows, the oracle rows and the claims) and ``allocation.json`` (the fitted
model). From those three files alone, ``recheck`` checks the claims again -- on a machine without the MLflow store that
ran the sweep, from a copy in ``benchmarks/results/`` -- and returns them beside the claims stored, which they equal
when the files are the sweep's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragscale.experiments.config import ConfigError
from ragscale.experiments.files import write_json
from ragscale.experiments.sweep.claims import check_claims, not_tested
from ragscale.experiments.sweep.ledger import ALLOCATION, RESULTS, SCORES, em_by_question
from ragscale.experiments.sweep.rows import Row


def collect(rows: Iterable[Row], records: Callable[[str], Sequence[dict] | None]) -> dict[str, dict[str, float]]:
    """Per run id of ``rows`` (the grid's and the oracle's), its per-question EM in percent from its ``records``
    (``ledger.run_records``); a run whose records cannot be read is left out, and the comparisons that need it say
    so (``claims.Pairs``)."""
    scores: dict[str, dict[str, float]] = {}
    for row in rows:
        run_id = row.run_id
        if run_id and run_id not in scores and (em := em_by_question(records(run_id))) is not None:
            scores[run_id] = em
    return scores


def save(sweep_dir: Path, scores: Mapping[str, Mapping[str, float]]) -> None:
    write_json(Path(sweep_dir) / SCORES, scores, indent=0)


def read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: not found; a sweep's folder holds {RESULTS}, {SCORES} and {ALLOCATION}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc


def check_against(rows: Iterable[Row], scores: Mapping[str, Mapping[str, float]], path: Path) -> None:
    """Each run's scores in ``path`` are its row's: as many questions as its ``n``, their mean its ``em``."""
    for row in rows:
        got = scores.get(row.run_id or "")
        if got is None:
            continue
        mean = sum(got.values()) / len(got) if got else float("nan")
        if len(got) != row.n or not abs(mean - row.em) < 0.01:
            raise ConfigError(
                f"{path}: run {row.run_id} has {len(got)} scores averaging {mean:.2f}, but its row in {RESULTS} "
                f"says n {row.n} and em {row.em}: the files are not of one sweep"
            )


def recheck(sweep_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The claims checked again from ``results.json``, ``scores.json`` and ``allocation.json`` in ``sweep_dir`` (a
    sweep that fitted no model has none), and the claims ``results.json`` holds."""
    sweep_dir = Path(sweep_dir)
    results, scores = read(sweep_dir / RESULTS), read(sweep_dir / SCORES)
    missing = [k for k in ("grid", "rows", "oracle", "claims") if k not in results]
    if missing:
        raise ConfigError(f"{sweep_dir / RESULTS}: lacks {', '.join(missing)} (written by an older ragscale)")
    rows, oracle = ([Row.from_json(r, source=str(sweep_dir / RESULTS)) for r in results[k]] for k in ("rows", "oracle"))
    check_against([*rows, *oracle], scores, sweep_dir / SCORES)
    fitted = read(sweep_dir / ALLOCATION) if (sweep_dir / ALLOCATION).exists() else None
    claims = check_claims(rows, results["grid"]["budgets"], fitted, scores.get, oracle=oracle)
    claims = not_tested(claims, results.get("below_floor", {}))  # judged on records these files do not hold
    return json.loads(json.dumps(claims)), results["claims"]
