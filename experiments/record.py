"""A run's record in MLflow: opened with the params and tags that name it (or reopened to resume it), its results
logged (metrics, files, the evaluation table, the program as an MLflow model), and what finished kept when it
fails. ``run_experiment`` (``runner.py``) decides what to record; this module writes it."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ragscale.experiments import resume, tracking
from ragscale.experiments.config import RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, PREDICTIONS, write_tables
from ragscale.experiments.files import disk_error, one_line, slug, write_json, write_text
from ragscale.experiments.model import MODEL, Searched, log_program
from ragscale.experiments.signals import interrupted

if TYPE_CHECKING:
    from ragscale.data.corpora import CorpusIdentity

log = logging.getLogger(__name__)

PROGRAM = "program.json"
"""The compiled program's file (DSPy's JSON state) in a run's work folder."""

SUMMARY = "summary.json"
"""The run's summary in its work folder, written each time its questions have all been asked."""

METRICS = (
    "em", "f1", "acc", "retrieval_recall", EFFECTIVE_CONTEXT, "output_tokens_per_question", "lm_calls_per_question",
    "questions_per_minute", "wall_s", "compile_s", "compile_lm_calls", "compile_input_tokens", "compile_output_tokens",
    "eval_s", "n", "failed", "peak_rss_gb", "resumed",
)  # fmt: skip
"""The summary's values logged as MLflow metrics (with load_s, index_s and each behaviour value as
``behaviour.<name>``)."""


EVALUATION_TABLE = "eval_results_table.json"
"""The per-question records as an MLflow table: the UI's evaluation view compares two runs question by question."""


def corpus_params(corpus: CorpusIdentity | None) -> dict[str, str]:
    """The MLflow params that name a run's corpus beside ``corpus`` (the name it was asked by): its passages and
    its sha256; none for a run that retrieves nothing."""
    if corpus is None:
        return {}
    return {"corpus_passages": str(corpus.passages), "corpus_sha256": corpus.sha256}


def oracle_params(retriever) -> dict[str, str]:
    """The MLflow param that names a retriever given to a run by what it returns (an oracle row's), so the run is
    told apart from the method's own; none for any other retriever."""
    identity = getattr(retriever, "identity", None)
    return {"retriever_identity": identity} if identity else {}


def default_run_name(config: RunConfig) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{config.method}-{config.optimizer}-{config.dataset}-{slug(config.lm)}-{stamp}"


def open_run(
    config: RunConfig, key: str, *, params: Mapping[str, str], tags: Mapping[str, str], parent_run_id: str | None,
    fresh: bool,
) -> tuple[str, IO | None, bool]:  # fmt: skip
    """The MLflow run of the run keyed ``key``: an unfinished one of the same key, or a finished one with failed
    questions, reopened (unless ``fresh``; ``resume.find_resumable``), else a new one with the config's params and
    ``params`` (``corpus_params``, ``oracle_params``), tagged with the key and ``tags`` (``provenance_tags``, taken
    before: they may hash a model file). Returns its id, the lock that claims its work folder, and whether it was
    resumed."""
    with resume.taking_turns(config.runs_dir):  # one step: two processes never take over the same run
        found = None if fresh else resume.find_resumable(config.runs_dir, key)
        if found is not None:
            run_id, lock = found
            parent = {"mlflow.parentRunId": parent_run_id} if parent_run_id is not None else None
            try:
                tracking.reopen_run(config.runs_dir, run_id, parent)
            except BaseException:
                lock.close()
                raise
            return run_id, lock, True
        run_id, lock = resume.open_new(
            config.runs_dir,
            run_name=config.run_name or default_run_name(config),
            params={**config.to_params(), **params},
            parent_run_id=parent_run_id,
            tags={
                "method": config.method,
                "dataset": config.dataset,
                "optimizer": config.optimizer,
                "lm": config.lm,
                resume.RUN_KEY_TAG: key,
                **tags,
            },
        )
        return run_id, lock, False


def log_model(config: RunConfig, run_id: str, program, corpus, work: Path) -> str | None:
    """Log the run's program as an MLflow model (``model.py``: code and JSON, no pickle) and return its URI; None
    for a program searching a retriever given to the run (an oracle's, a sweep's), which the model cannot carry. A
    run that finished before (its failed questions now asked again) has logged it already: the URI its summary in
    ``work`` names is returned, and the same program is not logged twice. A failure to log it is a warning (the
    run's results stand without it), but for a full or read-only disk, which ends the run."""
    if program.retrieves and corpus is None:
        return None
    logged = _logged_model(work)
    if logged is not None:
        return logged
    searched = None
    if corpus is not None:
        searched = Searched(corpus, config.retriever, index_dir=config.runs_dir / "indexes",
                            chroma_url=config.chroma_url, data_dir=config.data_dir)  # fmt: skip
    lm = {"lm": config.lm, "api_base": config.api_base, "max_tokens": config.max_tokens, "weights": config.weights}
    try:
        with tracking.active(config.runs_dir, run_id):
            log_program(program, lm=lm, adapter=config.adapter, searched=searched)
    except Exception as exc:
        found = disk_error(exc)
        if found is not None:  # named by the run's artifacts, where the model goes (a copy names its source)
            raise OSError(found.errno, found.strerror, tracking.artifact_folder(config.runs_dir, run_id)) from exc
        log.warning("run %s: its program could not be logged as an MLflow model: %s", run_id, exc)
        return None
    return f"runs:/{run_id}/{MODEL}"


def _logged_model(work: Path) -> str | None:
    """The model URI the summary in ``work`` names (a run that finished before), else None."""
    path = work / SUMMARY
    return json.loads(path.read_text(encoding="utf-8")).get("model_uri") if path.exists() else None


def log_results(
    config: RunConfig, run_id: str, work: Path, records: Sequence[Mapping], summary: Mapping[str, Any],
    timings: Mapping[str, float],
) -> None:  # fmt: skip
    """Write the run's summary, config and tables into ``work`` and log them, its predictions and its program with
    the summary's ``METRICS`` (and ``timings``: load_s, index_s) to its MLflow run."""
    write_json(work / SUMMARY, summary, indent=2)
    write_text(work / "config.toml", config.to_toml())
    tables = write_tables(records, work)
    metrics = {name: summary[name] for name in METRICS}
    metrics.update({f"behaviour.{name}": value for name, value in summary["behaviour"].items()})
    if summary["weights_gb"] is not None:
        metrics["weights_gb"] = summary["weights_gb"]
    tracking.log_metrics(config.runs_dir, run_id, {**metrics, **timings})
    files = [work / PREDICTIONS, *tables, work / PROGRAM, work / "config.toml", work / SUMMARY]
    tracking.log_artifacts(config.runs_dir, run_id, files)


def finish(config: RunConfig, run_id: str, records: Sequence[Mapping]) -> None:
    """Log the evaluation table of a run that finished and end its MLflow run FINISHED."""
    tracking.log_table(config.runs_dir, run_id, records, EVALUATION_TABLE)
    tracking.end_run(config.runs_dir, run_id)


def keep_partial(config: RunConfig, run_id: str, work: Path, exc: BaseException) -> None:
    """Keep what a run that raised ``exc`` finished: the predictions and the program written so far go to MLflow,
    the run marked KILLED (Ctrl-C, SIGTERM) or FAILED, each tried on its own, so that a store that still takes the
    status gets it when the artifacts cannot be copied (a full disk). A failure of either is a one-line warning:
    ``exc`` is the error to report."""
    written = [path for path in (work / PREDICTIONS, work / PROGRAM) if path.exists()]
    status = "KILLED" if interrupted(exc) else "FAILED"
    for what, step in (  # the status first: copying the artifacts may take the last of a full disk
        (f"the status {status}", lambda: tracking.end_run(config.runs_dir, run_id, status=status)),
        ("the partial artifacts", lambda: tracking.log_artifacts(config.runs_dir, run_id, written)),
    ):
        try:
            step()
        except Exception as tracking_error:  # the run's own error is the one to report
            log.warning("run %s: could not log %s: %s", run_id, what, one_line(tracking_error))
