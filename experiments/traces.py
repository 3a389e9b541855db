"""MLflow traces of a run's questions (``--trace``): every module, predictor and LM call of each question, with
its prompt, completion and token counts, in the MLflow UI's trace view, linked to the run.

``tracing(runs_dir, run_id)`` is a context manager around a run's evaluation: it points MLflow's tracing at the
run's store and experiment, turns on ``mlflow.dspy.autolog`` (DSPy's calls become spans) and, when the block ends,
turns it off and links every trace tagged with the run to it (``MlflowClient.link_traces_to_run``).
``question(example)``, entered by ``evaluate.answer_one`` around each question, opens the question's root span,
tagged with the run and the question id, under which DSPy's spans nest; outside ``tracing`` it does nothing.
Each question runs in a copy of the caller's context, so the threads of an evaluation carry the run.

Tracing is off by default: it costs time on every call (``docs/runs.md`` says how much). MLflow's tracing is
process-wide state, so one traced run at a time per process.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path

RUN_TAG = "ragscale.run_id"
"""The trace tag that names the run a question's trace belongs to."""

_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragscale_traced_run", default=None)


@contextlib.contextmanager
def tracing(runs_dir: Path, run_id: str) -> Iterator[None]:
    """Trace the questions answered inside the block into run ``run_id`` (see the module docstring)."""
    import dspy
    import mlflow
    from mlflow.dspy.callback import MlflowCallback

    from ragscale.experiments import tracking

    previous = os.environ.get("MLFLOW_TRACKING_URI")  # mlflow.set_tracking_uri also sets it for the process
    mlflow.set_tracking_uri(tracking.tracking_uri(runs_dir))
    mlflow.set_experiment(experiment_id=tracking.experiment_id(tracking.client(runs_dir), runs_dir))
    mlflow.dspy.autolog(log_traces=True, log_traces_from_compile=False, log_traces_from_eval=True, silent=True)
    # autolog adds its callback to DSPy's global settings, which a dspy.context entered earlier (the run's LM and
    # adapter) does not see: the callback is added to the current context too.
    callbacks = [c for c in dspy.settings.callbacks if not isinstance(c, MlflowCallback)]
    token = _RUN.set(run_id)
    try:
        with dspy.context(callbacks=[*callbacks, MlflowCallback()]):
            yield
    finally:
        _RUN.reset(token)
        mlflow.dspy.autolog(disable=True, silent=True)
        mlflow.flush_trace_async_logging()
        if previous is None:  # later runs of this process track where they would have
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = previous
        link(runs_dir, run_id)


def link(runs_dir: Path, run_id: str) -> int:
    """Link the traces tagged with ``run_id`` to the run; returns how many."""
    from ragscale.experiments import tracking

    client = tracking.client(runs_dir)
    experiment = tracking.experiment_id(client, runs_dir)
    ids, page = [], None
    while True:
        traces = client.search_traces(locations=[experiment], filter_string=f"tags.`{RUN_TAG}` = '{run_id}'",
                                      max_results=500, page_token=page, include_spans=False)  # fmt: skip
        ids += [trace.info.trace_id for trace in traces]
        page = traces.token
        if not page:
            break
    for start in range(0, len(ids), 100):  # MLflow links at most 100 at a time
        client.link_traces_to_run(ids[start : start + 100], run_id)
    return len(ids)


@contextlib.contextmanager
def question(example) -> Iterator[None]:
    """The root span of one question's trace while a run is traced; nothing otherwise."""
    run_id = _RUN.get()
    if run_id is None:
        yield
        return
    import mlflow

    with mlflow.start_span(name=f"question {example.id}", attributes={"question": example.question}):
        mlflow.update_current_trace(tags={RUN_TAG: run_id, "ragscale.question_id": str(example.id)})
        yield
