"""MLflow tracking of runs: a sqlite store under the runs directory, or the tracking server MLflow is told of.

Everything goes through an explicit `MlflowClient` (no active-run state), so a sweep can open child runs from
worker code and tests can point at `tmp_path`. The store is MLflow's own ``MLFLOW_TRACKING_URI`` when it is set
(a tracking server, ``http://host:5000``, or any store URI MLflow takes; ``--tracking-uri`` sets it for the
process), else `sqlite:///<absolute runs_dir>/mlflow.db`. Outside a tracking server the experiment is created
with its artifact location under `<runs_dir>/artifacts` (MLflow's defaults would land both in the current
directory); a server keeps artifacts where it was told to. MLflow is imported inside the functions: importing
this module is cheap.

Any number of processes may open one store at once: the first opening of a store in a process (creating its
schema, or migrating it, and the ragscale experiment) holds an exclusive lock on ``<runs_dir>/mlflow.lock``, so
two runs started together on a new runs directory do not both create the tables.

A write that a full disk or a read-only file system refuses raises the ``OSError`` that names where: MLflow's sqlite
store names no file when SQLite refuses a write, and a copied artifact names its source, so the functions here that
write name the store's file, or the artifact's place in the run, instead (``_naming_store``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ragscale.experiments.files import disk_error, exclusive, unnamed_disk_error
from ragscale.process import go_offline

EXPERIMENT = "ragscale"
RUN_KIND_TAG = "ragscale.kind"

log = logging.getLogger(__name__)


def local_uri(runs_dir: Path) -> str:
    """The default store: a sqlite file under the runs directory."""
    return f"sqlite:///{Path(runs_dir).resolve() / 'mlflow.db'}"


def tracking_uri(runs_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI`` when set, else the sqlite store under ``runs_dir``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or local_uri(runs_dir)


def is_local(runs_dir: Path) -> bool:
    """Whether runs go to the default sqlite store under ``runs_dir``."""
    return tracking_uri(runs_dir) == local_uri(runs_dir)


def is_server(runs_dir: Path) -> bool:
    """Whether runs go to a tracking server, which keeps artifacts where it was told to."""
    return tracking_uri(runs_dir).startswith(("http://", "https://", "databricks"))


def store_file(runs_dir: Path) -> str:
    """Where the store's writes go, as an error names it: the sqlite file under ``runs_dir``, else the store's URI."""
    return str(Path(runs_dir).resolve() / "mlflow.db") if is_local(runs_dir) else tracking_uri(runs_dir)


def _naming_store(function: Callable) -> Callable:
    """``function`` (which takes the runs directory first) with a full disk or a read-only file system that names no
    file raised as the OSError naming the store's file (``store_file``)."""

    @functools.wraps(function)
    def named(runs_dir: Path, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(runs_dir, *args, **kwargs)
        except Exception as exc:
            named = unnamed_disk_error(exc, store_file(runs_dir))
            if named is None:
                raise
            raise named from exc

    return named


_opened: set[tuple[Path, str]] = set()  # (runs directory, store URI) opened in this process
_opening = threading.Lock()
_fluent = threading.RLock()


@_naming_store
def client(runs_dir: Path):
    """An `MlflowClient` on the store of ``tracking_uri(runs_dir)`` (the runs directory is created if needed); the
    store's first opening in this process creates its schema (a new local store: ``_create_store``) and the ragscale
    experiment under the runs directory's file lock."""
    go_offline()  # MLflow reads MLFLOW_DISABLE_TELEMETRY when first imported
    from mlflow.tracking import MlflowClient

    runs_dir = Path(runs_dir).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    uri = tracking_uri(runs_dir)
    with _opening:
        if (runs_dir, uri) not in _opened:
            with exclusive(runs_dir / "mlflow.lock"):
                if is_local(runs_dir) and not (runs_dir / "mlflow.db").exists():
                    _create_store(runs_dir)
                experiment_id(MlflowClient(tracking_uri=uri), runs_dir)  # a client makes or migrates the schema
            _opened.add((runs_dir, uri))
    return MlflowClient(tracking_uri=uri)


def _create_store(runs_dir: Path) -> None:
    """The sqlite store under ``runs_dir`` made whole or not at all: its tables and the ragscale experiment written to
    a temporary file beside it, which is then renamed into place. A full disk leaves neither a half-made store (its
    next opening would fail on the half-made tables) nor the temporary file."""
    from mlflow.tracking import MlflowClient

    partial = runs_dir / f"mlflow.db.{os.getpid()}.tmp"
    try:
        experiment_id(MlflowClient(tracking_uri=f"sqlite:///{partial}"), runs_dir)
        partial.replace(runs_dir / "mlflow.db")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def experiment_id(mlflow_client, runs_dir: Path, name: str = EXPERIMENT) -> str:
    """The id of experiment `name`, created when it is new: with artifacts where a tracking server puts them, else
    under `<runs_dir>/artifacts` (MLflow's default would be `./mlruns` in the current directory)."""
    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    if is_server(runs_dir):
        return mlflow_client.create_experiment(name)
    artifacts = (Path(runs_dir).resolve() / "artifacts").as_uri()
    return mlflow_client.create_experiment(name, artifact_location=artifacts)


@_naming_store
def start_run(
    runs_dir: Path,
    *,
    run_name: str,
    params: Mapping[str, str],
    tags: Mapping[str, str] | None = None,
    parent_run_id: str | None = None,
    kind: str = "run",
) -> str:
    """Create a run holding `params` (the whole config) and return its id; a child run when `parent_run_id`."""
    go_offline()
    from mlflow.entities import Param, RunTag

    mlflow_client = client(runs_dir)
    all_tags = {RUN_KIND_TAG: kind, **(tags or {})}
    if parent_run_id is not None:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = mlflow_client.create_run(experiment_id(mlflow_client, runs_dir), run_name=run_name, tags=all_tags)
    run_id = run.info.run_id
    mlflow_client.log_batch(
        run_id,
        params=[Param(key, str(value)) for key, value in params.items()],
        tags=[RunTag(key, value) for key, value in all_tags.items()],
    )
    return run_id


@_naming_store
def log_params(runs_dir: Path, run_id: str, params: Mapping[str, Any]) -> None:
    """Log more params to a run (each once: MLflow refuses a param logged again with another value)."""
    go_offline()
    from mlflow.entities import Param

    client(runs_dir).log_batch(run_id, params=[Param(key, str(value)) for key, value in params.items()])


@_naming_store
def log_metrics(runs_dir: Path, run_id: str, metrics: Mapping[str, float | None]) -> None:
    """Log numeric metrics; None values (e.g. recall of a closed-book run) are left out."""
    go_offline()
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(key, float(value), now, 0) for key, value in metrics.items() if value is not None]
    client(runs_dir).log_batch(run_id, metrics=batch)


@_naming_store
def log_artifacts(runs_dir: Path, run_id: str, paths: list[Path]) -> None:
    """Copy each file of ``paths`` into the run's artifacts; a full or read-only disk names the artifact's place in
    the run (the copy's own error names the file copied)."""
    mlflow_client = client(runs_dir)
    for path in paths:
        try:
            mlflow_client.log_artifact(run_id, str(path))
        except OSError as exc:
            if disk_error(exc) is None:
                raise
            raise OSError(exc.errno, exc.strerror, f"{artifact_folder(runs_dir, run_id)}/{path.name}") from exc


def artifact_folder(runs_dir: Path, run_id: str) -> str:
    """The run's artifact folder: a local path for a local artifact store, else its URI."""
    from mlflow.utils.file_utils import local_file_uri_to_path

    uri = client(runs_dir).get_run(run_id).info.artifact_uri
    return local_file_uri_to_path(uri) if uri.startswith("file:") else uri


@_naming_store
def log_table(runs_dir: Path, run_id: str, records: list[Mapping[str, Any]], artifact_file: str) -> None:
    """Log per-question ``records`` as an MLflow table (a JSON artifact the UI's evaluation view shows and compares
    across runs, question by question): one row a record, lists joined with " | "."""
    columns: dict[str, list] = {}
    for name in records[0] if records else ():
        values = [record.get(name) for record in records]
        if all(isinstance(value, list) or value is None for value in values):
            values = [" | ".join(map(str, value or [])) for value in values]
        elif not all(isinstance(value, str | int | float | bool) or value is None for value in values):
            continue  # nested values (a record's behaviour) stay in the predictions file
        columns[name] = values
    mlflow_client = client(runs_dir)
    if artifact_file in {artifact.path for artifact in mlflow_client.list_artifacts(run_id)}:
        # a run finished again (its failed questions asked again): MLflow's log_table would append, so the table is
        # written as log_table writes it and replaces the one logged before
        import pandas as pd

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / artifact_file
            pd.DataFrame(columns).to_json(path, orient="split", index=False, date_format="iso")
            mlflow_client.log_artifact(run_id, str(path))
        return
    mlflow_client.log_table(run_id, data=columns, artifact_file=artifact_file)


@contextlib.contextmanager
def pointed_at(runs_dir: Path) -> Iterator[None]:
    """MLflow's fluent API (``mlflow.start_run``, ``log_model``, autolog, tracing) pointed at the runs directory's
    store and the ragscale experiment for the block; the tracking URI and the active experiment are as they were
    afterwards, so the caller's own MLflow calls, and later runs, track where they would have."""
    import mlflow
    from mlflow.tracking import fluent

    with _fluent:  # the fluent API's store is the process's: one runs directory at a time
        uri = os.environ.get("MLFLOW_TRACKING_URI")  # mlflow.set_tracking_uri also sets it for the process
        experiment = fluent._active_experiment_id, os.environ.get("MLFLOW_EXPERIMENT_ID")  # no public getter
        mlflow.set_tracking_uri(tracking_uri(runs_dir))
        mlflow.set_experiment(experiment_id=experiment_id(client(runs_dir), runs_dir))
        try:
            yield
        finally:
            mlflow.set_tracking_uri(uri)  # None unsets the variable again
            fluent._active_experiment_id = experiment[0]
            if experiment[1] is None:
                os.environ.pop("MLFLOW_EXPERIMENT_ID", None)
            else:
                os.environ["MLFLOW_EXPERIMENT_ID"] = experiment[1]


@contextlib.contextmanager
def active(runs_dir: Path, run_id: str) -> Iterator[None]:
    """Run ``run_id`` as MLflow's active run for the block (what ``log_model`` and DSPy's autolog log into), nested
    in the caller's own active run if there is one; ``run_id`` is RUNNING again afterwards, since the runner, not
    the block, says how it ends, and the caller's run is active again."""
    import mlflow

    with pointed_at(runs_dir):
        try:
            with mlflow.start_run(run_id=run_id, nested=mlflow.active_run() is not None):
                yield
        finally:
            client(runs_dir).update_run(run_id, status="RUNNING")


@_naming_store
def log_data_files(runs_dir: Path, run_id: str, files: Mapping[str, Path]) -> None:
    """Log each file of ``files`` (context, e.g. "train" or "eval" -> path) as an MLflow dataset input of the run:
    named by its folder and file name, its digest the first 32 hex digits of its sha256 (MLflow keeps 36
    characters), the whole sha256 and size in its profile."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    from ragscale.experiments.provenance import file_sha256

    inputs = []
    for context, path in files.items():
        sha256 = file_sha256(path)
        dataset = Dataset(
            name=f"{path.parent.name}/{path.name}",
            digest=sha256[:32],
            source_type="local",
            source=json.dumps({"uri": path.resolve().as_uri()}),
            profile=json.dumps({"sha256": sha256, "bytes": path.stat().st_size}),
        )
        inputs.append(DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)]))
    client(runs_dir).log_inputs(run_id, datasets=inputs)


@_naming_store
def end_run(runs_dir: Path, run_id: str, status: str = "FINISHED") -> None:
    """Mark a run FINISHED, FAILED or KILLED."""
    client(runs_dir).set_terminated(run_id, status=status)


@_naming_store
def reopen_run(runs_dir: Path, run_id: str, tags: Mapping[str, str] | None = None) -> None:
    """Mark a killed or failed run RUNNING again (a resumed run), with ``tags`` set on it."""
    mlflow_client = client(runs_dir)
    mlflow_client.update_run(run_id, status="RUNNING")
    for key, value in (tags or {}).items():
        mlflow_client.set_tag(run_id, key, value)


def unfinished_runs(runs_dir: Path, tag: str, value: str) -> list[Any]:
    """Runs of the ragscale experiment tagged ``tag = value`` that did not finish (RUNNING, FAILED or KILLED),
    newest first; empty when there is no store."""
    return search_runs(
        runs_dir, f"tags.`{tag}` = '{value}' and attributes.status != 'FINISHED'", order="DESC", max_results=100
    )


def search_runs(runs_dir: Path, filter_string: str, *, order: str = "ASC", max_results: int = 10_000) -> list[Any]:
    """Runs of the ragscale experiment that match ``filter_string`` (MLflow's search syntax), by start time
    (``order`` ASC or DESC); empty when there is no store or no experiment yet."""
    runs_dir = Path(runs_dir).resolve()
    if is_local(runs_dir) and not (runs_dir / "mlflow.db").exists():
        return []
    mlflow_client = client(runs_dir)
    experiment = mlflow_client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return []
    return list(
        mlflow_client.search_runs(
            [experiment.experiment_id],
            filter_string=filter_string,
            order_by=[f"attributes.start_time {order}"],
            max_results=max_results,
        )
    )


def artifact_path(runs_dir: Path, run_id: str, name: str) -> Path:
    """The local path of a run's artifact `name`: read in place from a local artifact store (the default, under
    `<runs_dir>/artifacts`), downloaded to a temporary folder from a remote one."""
    go_offline()
    from mlflow.artifacts import download_artifacts
    from mlflow.utils.file_utils import local_file_uri_to_path

    uri = client(runs_dir).get_run(run_id).info.artifact_uri
    if uri.startswith("file:") or "://" not in uri:
        path = Path(local_file_uri_to_path(uri)) / name
        if path.exists():
            return path
    return Path(download_artifacts(run_id=run_id, artifact_path=name, tracking_uri=tracking_uri(runs_dir)))


def finished_runs(runs_dir: Path, kind: str = "run", statuses: tuple[str, ...] = ("FINISHED",)) -> list[Any]:
    """Runs of the ragscale experiment of this kind that ended with one of ``statuses``, oldest first (empty when
    there is no store)."""
    runs = search_runs(runs_dir, f"tags.`{RUN_KIND_TAG}` = '{kind}'")
    return [run for run in runs if run.info.status in statuses]
