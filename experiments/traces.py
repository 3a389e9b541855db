"""MLflow traces of a run's questions (``--trace``): every module, predictor and LM call of each question, with
its prompt, completion and token counts, in the MLflow UI's trace view, linked to the run.

``tracing(runs_dir, run_id)`` is a context manager around a run's evaluation: it points MLflow's tracing at the
run's store and experiment, turns on ``mlflow.dspy.autolog`` (DSPy's calls become spans) and, when the block ends,
turns it off and links every trace tagged with the run to it (``MlflowClient.link_traces_to_run``).
``question(example)``, entered by ``evaluate.answer_one`` around each question, opens the question's root span,
tagged with the run and the question id, under which DSPy's spans nest; outside ``tracing`` it does nothing.
Each question runs in a copy of the caller's context, so the threads of an evaluation carry the run.

Tracing is off by default: it costs time on every call (``docs/runs.md`` says how much). ``compile_logging`` is
DSPy's compile and evaluation logging (MLflow's ``log_compiles`` and ``log_evals``), which a tracked run turns on
while it compiles unless told not to (``--no-autolog``). MLflow's autolog is process-wide state, so one traced or
compiling run at a time per process.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from ragscale.experiments import tracking

log = logging.getLogger(__name__)

RUN_TAG = "ragscale.run_id"
"""The trace tag that names the run a question's trace belongs to."""

_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragscale_traced_run", default=None)


@contextlib.contextmanager
def _autolog(**options: bool) -> Iterator[bool]:
    """``mlflow.dspy.autolog(**options)`` for the block; yields whether it is on. Autolog puts its callback (with
    every callback of the ``dspy.context`` it is called in, such as a sweep's stopper) and usage tracking into DSPy's
    process-wide settings, which a ``dspy.context`` entered earlier (the run's LM and adapter) does not see: those
    settings are set back at once and afterwards, and the block's own context carries the callback and the
    tracking. Left off, with a warning, where autolog would change what is not the block's: DSPy
    autolog the caller turned on (its settings stand), or DSPy settings that this thread may not change."""
    import dspy
    import mlflow
    from mlflow.dspy.callback import MlflowCallback
    from mlflow.utils.autologging_utils import autologging_is_disabled

    # DSPy's process-wide settings, which a dspy.context entered around this block hides (no public getter), and its
    # rule: only the thread that configured them first may configure them again
    dspy_settings = importlib.import_module("dspy.dsp.utils.settings")
    mine = dspy_settings.config_owner_thread_id in (None, threading.get_ident())
    if not autologging_is_disabled("dspy") or not mine:
        reason = "DSPy was configured by another thread" if not mine else "it is on already"
        log.warning("DSPy autolog not turned on for this block: %s", reason)
        yield False
        return
    before = {key: dspy_settings.main_thread_config.get(key) for key in ("callbacks", "track_usage")}

    def restore() -> None:  # autolog writes the callbacks it sees, a dspy.context's too, into DSPy's process settings
        dspy.settings.configure(callbacks=list(before["callbacks"] or []), track_usage=before["track_usage"])

    mlflow.dspy.autolog(silent=True, **options)
    restore()  # the block's own context carries what autolog needs
    callbacks = [c for c in dspy.settings.callbacks if not isinstance(c, MlflowCallback)]
    try:
        with dspy.context(callbacks=[*callbacks, MlflowCallback()], track_usage=True):
            yield True
    finally:
        mlflow.dspy.autolog(disable=True, silent=True)
        mlflow.flush_trace_async_logging()
        restore()


@contextlib.contextmanager
def tracing(runs_dir: Path, run_id: str) -> Iterator[None]:
    """Trace the questions answered inside the block into run ``run_id`` (see the module docstring); the traces
    are linked to the run however the block ends."""
    try:
        with tracking.pointed_at(runs_dir), _autolog(log_traces=True, log_traces_from_compile=False):
            token = _RUN.set(run_id)
            try:
                yield
            finally:
                _RUN.reset(token)
    finally:
        link(runs_dir, run_id)


@contextlib.contextmanager
def compile_logging(runs_dir: Path, run_id: str) -> Iterator[None]:
    """DSPy's own logging of compilation, ``mlflow.dspy.autolog(log_compiles=True, log_evals=True)``, into run
    ``run_id`` for the block: each teleprompter's best program as JSON (``best_model.json``), its trainset and
    valset as tables, the LM's settings, and a nested run with its score for each evaluation a teleprompter makes
    (random-search's and MIPRO's candidates). No trace of each call is kept (``--trace`` does that)."""
    with tracking.active(runs_dir, run_id), _autolog(log_traces=False, log_compiles=True, log_evals=True):
        yield


def link(runs_dir: Path, run_id: str) -> int:
    """Link the traces tagged with ``run_id`` to the run; returns how many."""
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
