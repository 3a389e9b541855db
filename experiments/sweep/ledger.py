"""What a sweep remembers: each finished configuration by a key of its settings and data, in ``ledger.json``.

A configuration's key hashes what determines its result (``identity.config_key``: its settings and a fingerprint of
the questions). Finished configurations are kept in ``ledger.json`` in the sweep directory and tagged on their
MLflow child runs (``SWEEP_KEY_TAG``, with the estimate made just before they ran), so a rerun skips them even
when the ledger is lost. A row holds the run's summary values under the names of its MLflow metrics. The names of
the other files a sweep keeps in its folder are here too: what it found (``results.json``), each run's
per-question Acc (``scores.json``) and its fitted allocation model (``allocation.json``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, PREDICTIONS
from ragscale.experiments.files import slug, write_json
from ragscale.experiments.sweep.rows import FIELDS
from ragscale.process import go_offline

log = logging.getLogger(__name__)

SWEEP_KEY_TAG = "ragscale.sweep_key"
ESTIMATE_TAG = "ragscale.sweep_estimate"  # the estimate made just before the configuration ran, as JSON
REPLICA_TAG = "ragscale.sweep_replica"  # the server that ran the configuration, of several replicas
LEDGER = "ledger.json"
RESULTS = "results.json"  # the rows, the per-budget table, the oracle rows and the claims
ALLOCATION = "allocation.json"  # the fitted allocation model
SCORES = "scores.json"  # each run's per-question EM, the claims' primary metric (``scores``)
COMPILED = "compiled"  # the programs compiled per method and shots, as JSON (``run.compiled_path``)
ROW_FIELDS = (
    "em", "f1", "acc", "n", "failed", EFFECTIVE_CONTEXT, "output_tokens_per_question", "lm_calls_per_question",
    "eval_s", "wall_s",
)  # fmt: skip


def sweep_dir_for(runs_dir: Path, dataset: str, lm: str, corpus: str | None = None) -> Path:
    """Where a sweep of ``dataset`` with ``lm`` keeps its ledger, results, plot and allocation model; a sweep that
    searches another corpus than the dataset's own (``--corpus``) has a folder of its own."""
    name = f"{dataset}-{slug(lm)}"
    if corpus is not None and corpus != dataset:
        name += f"-{slug(Path(corpus).stem)}"
    return Path(runs_dir).resolve() / "sweeps" / name


def load_ledger(sweep_dir: Path) -> dict[str, dict]:
    """The finished configurations recorded in ``ledger.json`` by key (empty when there is none); a file that is
    not a ledger of this version fails naming it (deleting it is safe: the MLflow runs rebuild it)."""
    path = sweep_dir / LEDGER
    if not path.exists():
        return {}
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); delete it, the MLflow runs rebuild it") from exc
    stale = [key for key, row in ledger.items() if not set(ROW_FIELDS) <= set(row) <= FIELDS]
    if stale:
        raise ConfigError(
            f"{path}: rows {', '.join(stale[:3])} lack {', '.join(ROW_FIELDS)} or hold fields a sweep row has not "
            "(a ledger of an older ragscale); delete it, the MLflow runs rebuild it"
        )
    return ledger


def save_ledger(sweep_dir: Path, ledger: Mapping[str, dict]) -> None:
    write_json(sweep_dir / LEDGER, ledger)


def ledger_row(
    run_id: str, lm: str | None, values: Mapping[str, Any], estimate: Mapping[str, Any], *,
    program: str | None = None, carried: int = 0, replica: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A finished configuration's row: its run, its LM, its summary values (``ROW_FIELDS``, by the names of the
    run's summary and MLflow metrics), the estimate made just before it ran (``estimate_fields``), the digest of the
    program it ran, how many questions it carried from a smaller iteration cap (``carry.py``) and the server that
    ran it (``replica``: its URL; None for a local model)."""
    row = {"run_id": run_id, "lm": lm, **{name: values.get(name) for name in ROW_FIELDS}}
    row["n"], row["failed"] = int(row["n"] or 0), int(row["failed"] or 0)
    row["resumed"] = int(values.get("resumed") or 0)  # questions carried over: eval_s did not time them
    return {**row, "program": program, "carried": carried, "replica": replica, **estimate}


def mlflow_rows(runs_dir: Path) -> dict[str, dict]:
    """Finished child runs tagged with a sweep key, as ledger rows by key (for a ledger that lost them)."""
    rows: dict[str, dict] = {}
    for run in tracking.finished_runs(runs_dir, kind="run"):
        key = run.data.tags.get(SWEEP_KEY_TAG)
        if key is not None:
            estimate = {k: v for k, v in json.loads(run.data.tags.get(ESTIMATE_TAG, "{}")).items() if k in FIELDS}
            rows[key] = ledger_row(
                run.info.run_id, run.data.tags.get("lm"), run.data.metrics, estimate,
                replica=run.data.tags.get(REPLICA_TAG),
            )  # fmt: skip
    return rows


def run_records(runs_dir: Path, run_id: str) -> list[dict] | None:
    """A finished run's per-question records (``predictions.jsonl``): from its work folder, else its MLflow
    artifact; None when neither can be read."""
    go_offline()
    from mlflow.exceptions import MlflowException

    path = Path(runs_dir) / "work" / run_id / PREDICTIONS
    try:
        if not path.exists():
            path = tracking.artifact_path(runs_dir, run_id, PREDICTIONS)
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, MlflowException) as exc:
        log.warning("no per-question records for run %s (%s): it calibrates no estimate", run_id, exc)
        return None
    return [json.loads(line) for line in lines if line.strip()]


def em_by_question(records: Sequence[dict] | None) -> dict[str, float] | None:
    """A finished run's per-question EM in percent by question id, from its ``run_records``; None without them."""
    return None if records is None else {str(r["id"]): 100 * float(r["em"]) for r in records}
