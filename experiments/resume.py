"""Resuming a run: a killed or failed run, or a finished one with failed questions, is found again by its key and
answers only what it had not answered.

A run is tagged with its key (``RUN_KEY_TAG``: ``identity.config_key`` of its config and questions). While a
process runs it, it holds an exclusive lock on ``<runs_dir>/work/<run id>/run.lock`` (every MLflow run ragscale
opens has one: a run's, a sweep's, a comparison's): a run whose lock is free belongs to no live process, so a rerun
of the same configuration may take it over; one whose lock is held is being run right now and is left alone. A
RUNNING run whose lock is free was left by a process that died (SIGKILL, an out-of-memory kill, a machine that
stopped): ``taking_turns``, which every command that opens or reads runs goes through, marks it KILLED first. Looking
for a run to take over, opening a new one and ending the abandoned ones happen under ``<runs_dir>/runs.lock``, so
two processes never take the same run, and a run is never seen RUNNING without its lock. The locks are ``flock``s
on local files: they tell live runs apart on one machine (or a shared file system that honours ``flock``); a RUNNING
run with no lock file here (another machine's, on a shared tracking server, or a user's own MLflow run) is left as it
is, but for one nested in a run of this runs directory (autolog's, for a teleprompter's evaluation), which goes with
that run.

What carries over: every question of ``predictions.jsonl`` that finished without an error (a failed question is
asked again), and the compiled program (``program.json``, with what compiling cost in ``compile.json``), so a
resumed run makes no LM call for what it already had.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError
from ragscale.experiments.files import exclusive, write_json

log = logging.getLogger(__name__)

RUN_KEY_TAG = "ragscale.run_key"
LOCK = "run.lock"
RUNS_LOCK = "runs.lock"
COMPILE = "compile.json"


def _held(lock: IO) -> IO | None:
    """``lock`` (an open lock file) held exclusively, or closed and None when another process holds it."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def claim(work: Path) -> IO | None:
    """The run folder's lock, held (keep the returned file open while the run is alive); None when another
    process holds it."""
    work.mkdir(parents=True, exist_ok=True)
    return _held((work / LOCK).open("a"))


@contextlib.contextmanager
def taking_turns(runs_dir: Path) -> Iterator[None]:
    """Hold ``<runs_dir>/runs.lock`` for the block: one process at a time looks for a run to take over, opens one,
    or ends the abandoned ones, which it does first (``end_abandoned``)."""
    with exclusive(Path(runs_dir) / RUNS_LOCK):
        _end_abandoned(runs_dir)
        yield


def end_abandoned(runs_dir: Path) -> None:
    """Mark KILLED every RUNNING run of the runs directory that no live process holds (see the module docstring):
    what each command that reads runs (compare, allocate) does before it reads them."""
    if Path(runs_dir).is_dir():  # no runs directory, no runs: nothing is created to find that out
        with taking_turns(runs_dir):
            pass


def _end_abandoned(runs_dir: Path) -> None:
    for run in tracking.search_runs(runs_dir, "attributes.status = 'RUNNING'"):
        run_id = run.info.run_id
        lock = _free_lock(Path(runs_dir) / "work", (run_id, run.data.tags.get("mlflow.parentRunId")))
        if lock is None:
            continue
        with lock:
            tracking.end_run(runs_dir, run_id, status="KILLED")
        log.warning("run %s was left RUNNING by a process that is gone (killed, or its machine stopped): marked "
                    "KILLED; its command run again resumes it", run_id)  # fmt: skip


def _free_lock(work: Path, owners: tuple[str | None, ...]) -> IO | None:
    """The lock of the first of ``owners`` (a run, then its parent) whose work folder under ``work`` has one, held
    now; None when it is held (a live process runs it) or none has one (another machine's run, or a run ragscale did
    not open). A nested run MLflow's autolog opens inside a run (a teleprompter's evaluation) has no lock of its own:
    its parent's tells whether it is alive."""
    for owner in owners:
        if owner and (work / owner / LOCK).exists():
            return _held((work / owner / LOCK).open("r"))
    return None


def open_new(runs_dir: Path, **start: Any) -> tuple[str, IO]:
    """A new MLflow run (``tracking.start_run``'s keywords) and its work folder's lock, held; call it inside
    ``taking_turns``, so no other process sees the run RUNNING before its lock exists. A folder that cannot be made
    (a full or read-only disk) ends the run FAILED before the error is raised."""
    run_id = tracking.start_run(runs_dir, **start)
    try:
        lock = claim(Path(runs_dir) / "work" / run_id)
    except BaseException:
        with contextlib.suppress(Exception):  # the folder's error is the one to report
            tracking.end_run(runs_dir, run_id, status="FAILED")
        raise
    assert lock is not None, f"the new run {run_id}'s folder is held by another process"
    return run_id, lock


def start_claimed(runs_dir: Path, **start: Any) -> tuple[str, IO]:
    """``open_new`` in its own turn (``taking_turns``): a sweep's or a comparison's MLflow run, with its lock."""
    with taking_turns(runs_dir):
        return open_new(runs_dir, **start)


def find_resumable(runs_dir: Path, key: str) -> tuple[str, IO] | None:
    """The newest run with this key that did not finish, or finished with failed questions, that no live process
    holds, with its lock now held; None if none.

    The runs that did not finish come first, newest first, but only those newer than the newest FINISHED run of the
    key (older ones were replaced by it, as ``--fresh`` does); then that FINISHED run itself when some of its
    questions failed (its ``failed`` metric): its rerun asks them again in the same run. A run is read again once
    its lock is held, so one whose status changed meanwhile is left alone."""
    finished = tracking.search_runs(
        runs_dir, f"tags.`{RUN_KEY_TAG}` = '{key}' and attributes.status = 'FINISHED'", order="DESC", max_results=1
    )
    newest_finished = finished[0].info.start_time if finished else -1
    unfinished = tracking.unfinished_runs(runs_dir, RUN_KEY_TAG, key)
    runs = [run for run in unfinished if run.info.start_time >= newest_finished]
    if finished and finished[0].data.metrics.get("failed", 0) > 0:
        runs.append(finished[0])
    for run in runs:
        work = Path(runs_dir) / "work" / run.info.run_id
        if not work.is_dir():
            continue
        lock = claim(work)
        if lock is None:
            log.info("run %s has the same configuration and is running in another process", run.info.run_id)
            continue
        if tracking.client(runs_dir).get_run(run.info.run_id).info.status != run.info.status:
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
