"""Resuming a run: a killed or failed run is found again by its key and answers only what it had not finished.

A run is tagged with its key (``RUN_KEY_TAG``: ``identity.config_key`` of its config and questions). While a
process runs it, it holds an exclusive lock on ``<runs_dir>/work/<run id>/run.lock``: an unfinished run (RUNNING,
FAILED or KILLED in MLflow) whose lock is free belongs to no live process, so a rerun of the same configuration
may take it over; one whose lock is held is being run right now and is left alone. Looking for a run to take over
and opening a new one are one step, under ``<runs_dir>/runs.lock``, so two processes never take the same run. The
locks are ``flock``s on local files: they tell live runs apart on one machine (or a shared file system that
honours ``flock``).

What carries over: every question of ``predictions.jsonl`` that finished without an error (a failed question is
asked again), and the compiled program (``program.json``, with what compiling cost in ``compile.json``), so a
resumed run makes no LM call for what it already had.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError
from ragscale.experiments.files import write_json

log = logging.getLogger(__name__)

RUN_KEY_TAG = "ragscale.run_key"
LOCK = "run.lock"
COMPILE = "compile.json"


def claim(work: Path) -> IO | None:
    """The run folder's lock, held (keep the returned file open while the run is alive); None when another
    process holds it."""
    work.mkdir(parents=True, exist_ok=True)
    lock = (work / LOCK).open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def find_resumable(runs_dir: Path, key: str) -> tuple[str, IO] | None:
    """The newest unfinished run with this key that no live process holds, with its lock now held; None if none.

    A run older than the newest FINISHED run of the key (one that ``--fresh`` replaced) is not taken up again, and
    a run is read again once its lock is held, so one that finished meanwhile is left alone."""
    finished = tracking.search_runs(
        runs_dir, f"tags.`{RUN_KEY_TAG}` = '{key}' and attributes.status = 'FINISHED'", order="DESC", max_results=1
    )
    newest_finished = finished[0].info.start_time if finished else -1
    for run in tracking.unfinished_runs(runs_dir, RUN_KEY_TAG, key):
        work = Path(runs_dir) / "work" / run.info.run_id
        if run.info.start_time < newest_finished or not work.is_dir():
            continue
        lock = claim(work)
        if lock is None:
            log.info("run %s has the same configuration and is running in another process", run.info.run_id)
            continue
        if tracking.client(runs_dir).get_run(run.info.run_id).info.status == "FINISHED":
            lock.close()
            continue
        return run.info.run_id, lock
    return None


def finished_records(path: Path) -> list[dict[str, Any]]:
    """The records of ``path`` (a run's ``predictions.jsonl``) that finished without an error, one per question
    id (the last); a last line cut short by a kill is ignored, any other broken line fails naming it."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records: dict[str, dict] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                log.warning("%s: line %d was cut short (the run was killed while writing it); it is asked again",
                            path, number)  # fmt: skip
                continue
            raise ConfigError(
                f"{path}, line {number}: not a JSON record ({exc}); fix or delete the line, or start over with --fresh"
            ) from exc
        if record.get("error") is None:
            records[str(record["id"])] = record
    return list(records.values())


def save_compile(work: Path, cost: Mapping[str, Any]) -> None:
    """What compiling cost (compile_s, and the LM calls, input_tokens and output_tokens it made), kept beside
    ``program.json`` for a resumed run."""
    write_json(work / COMPILE, dict(cost))


def load_compile(work: Path) -> Mapping[str, Any] | None:
    """``save_compile``'s record, or None when the run never finished compiling."""
    path = work / COMPILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
