"""A sweep's oracle rows: the RAG program given each question's gold paragraphs, alone and among distractors."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from ragscale.experiments import tracking
from ragscale.experiments.config import RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.files import disk_error
from ragscale.experiments.identity import config_key, data_fingerprint
from ragscale.experiments.oracle import OracleRetriever
from ragscale.experiments.runner import run_experiment
from ragscale.experiments.signals import Stopped
from ragscale.experiments.sweep.grid import Grid
from ragscale.experiments.sweep.ledger import SWEEP_KEY_TAG, ledger_row, save_ledger
from ragscale.experiments.sweep.rows import Row
from ragscale.experiments.sweep.setup import Setup

log = logging.getLogger(__name__)

ORACLE_NOTE = (
    "then two oracle rows (the RAG program given each question's gold paragraphs, then them padded to the grid's "
    "largest documents count with retrieved distractors): not estimated"
)
ORACLE_K = 20  # the gold paragraphs whatever k asks; k is as large as MuSiQue's 20, for the prompt's length check


def oracle_rows(
    base: RunConfig, got: Setup, grid: Grid, parent: str, *, progress: bool, report: Callable[[str], None]
) -> tuple[list[Row], list[str]]:
    """The RAG program given each question's gold paragraphs, then given them padded to the grid's largest
    documents count with the passages the retriever ranks highest that are not gold (``OracleRetriever``): the
    reader's bound without retrieval errors, and that bound among as many passages as the longest configuration
    reads, beside the grid. Run once as child runs of the sweep's MLflow run ``parent``, kept in the ledger under
    their keys like a configuration, and left out of the budget table and the allocation model (no retriever can do
    what they do). Returns their rows and the keys that failed."""
    if not all(getattr(ex, "paragraphs", None) for ex in got.evalset):
        report("no oracle rows: some questions carry no paragraphs")
        return [], []
    rows, failed = [], []
    widest, fingerprint = max(grid.docs, default=0), data_fingerprint(got.train, got.evalset)
    for distractors in (None, got.retriever) if got.retriever is not None and widest else (None,):
        retriever = OracleRetriever(got.evalset, gold_only=True, distractors=distractors)
        searched = got.corpus if distractors is not None else None  # the distractors' corpus names the run's key
        name = retriever.identity
        config = replace(
            base, method="rag", docs=ORACLE_K if distractors is None else widest, shots=0, optimizer="none",
            run_name=f"{got.sweep_dir.name}-{name}",
        )  # fmt: skip
        key = config_key(config, fingerprint, retriever=retriever, corpus=searched.identity if searched else None)
        found = got.ledger.get(key) or got.tracked.get(key)
        if found is None:
            given = "the gold paragraphs" if distractors is None else f"the gold paragraphs among {widest} passages"
            report(f"[oracle] {name}: the RAG program given {given}")
            try:
                summary = run_experiment(
                    config, lm=got.lm, retriever=retriever, corpus=searched, examples=(got.train, got.evalset),
                    parent_run_id=parent, progress=progress, check_context=True,
                )  # fmt: skip
            except Stopped as exc:  # the time limit, or the sweep stopped: the caller counts it stopped
                report(f"  ended, {exc}")
                failed.append(key)
                break
            except Exception as exc:  # like a configuration: reported, retried by a rerun, the sweep goes on
                if disk_error(exc) is not None:  # but a full or read-only disk stops the sweep, as it stops a run
                    raise
                log.exception("oracle row %s failed", name)
                report(f"  failed: {type(exc).__name__}: {exc}")
                failed.append(key)
                continue
            tracking.client(base.runs_dir).set_tag(summary["mlflow_run_id"], SWEEP_KEY_TAG, key)
            found = got.ledger[key] = ledger_row(summary["mlflow_run_id"], base.lm, summary, {})
            save_ledger(got.sweep_dir, got.ledger)
            report(f"  EM {summary['em']:.1f}; {summary[EFFECTIVE_CONTEXT]:,.0f} tokens/question")
        settings = {"method": name, "docs": 0 if distractors is None else widest, "shots": 0, "iterations": 0}
        rows.append(Row.from_json({**found, **settings, "key": key, "lm": base.lm}))
    return rows, failed
