"""Compiling a program by a teleprompter's name against a metric's name or a callable, as ``ragscale run`` does,
and logging it to MLflow's active run as a model that travels (``experiments/model.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dspy

    from ragscale.programs.base import Method

log = logging.getLogger(__name__)


def compile(
    program: Method,
    trainset: Sequence[dspy.Example],
    optimizer: str = "bootstrap",
    metric: str | Callable[..., float] = "em",
    *,
    shots: int = 4,
    docs_per_demo: int = 3,
    teacher: str | dspy.BaseLM | None = None,
    reflection_lm: str | dspy.BaseLM | None = None,
    seed: int = 0,
    threads: int = 1,
    log_model: bool = True,
    **options: Any,
) -> Method:
    """``program`` compiled on ``trainset`` by the teleprompter ``optimizer``, judged by ``metric``; a new program.

    ``optimizer`` is one of ``ragscale.optimizers.teleprompters.OPTIMIZERS`` (``none``, ``labeled``, ``bootstrap``,
    ``random-search``, ``mipro``, ``gepa``); ``metric`` is ``"em"``, ``"f1"``, ``"acc"`` or your own
    ``metric(example, prediction, trace=None) -> float``. ``shots`` demonstrations per predictor, each keeping
    ``docs_per_demo`` documents; ``teacher`` (a model name or an LM) writes the traces for the bootstrap family, and
    ``reflection_lm`` rewrites GEPA's instructions. A method's grader (CRAG's, Self-RAG's) is then compiled on its
    relevance labels, as ``ragscale run`` does (``optimizers.method.compile_method``). ``options`` are the
    teleprompter's own: ``valset``, ``num_candidates``, ``max_attempts``, GEPA's ``budget``. Uses the LM and adapter
    of ``configure`` (or ``dspy.context``).

    Under an active MLflow run (``mlflow.start_run()``), the compiled program is logged to it as the model
    ``model`` (``log_model=False`` does not): ``mlflow.pyfunc.load_model("runs:/<id>/model")`` loads it back.
    """
    from ragscale.optimizers.method import compile_method
    from ragscale.optimizers.metrics import METRICS
    from ragscale.programs.lm import load_lm

    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; valid choices: {', '.join(METRICS)}, or a callable")
        metric = METRICS[metric]
    teacher, reflection_lm = (load_lm(lm) if isinstance(lm, str) else lm for lm in (teacher, reflection_lm))
    compiled = compile_method(program, trainset, optimizer=optimizer, metric=metric, shots=shots,
                              docs_per_demo=docs_per_demo, threads=threads, seed=seed, teacher_lm=teacher,
                              reflection_lm=reflection_lm, **options)  # fmt: skip
    if log_model:
        _log_if_tracked(compiled)
    return compiled


def _log_if_tracked(program: Method) -> None:
    """Log ``program`` to MLflow's active run, if there is one, as the model ``model``. Compiling is done by then,
    so a program that cannot be logged (a function retriever, an LM that names no model, a store that fails) is
    said so in a warning and returned all the same."""
    import sys

    if "mlflow" not in sys.modules:  # no run can be active in a process that never imported MLflow
        return
    import dspy
    import mlflow

    from ragscale.experiments.model import log_program
    from ragscale.programs.lm import adapter_name, lm_reference

    if mlflow.active_run() is None:
        return
    try:
        uri = log_program(program, lm=lm_reference(dspy.settings.lm), adapter=adapter_name(dspy.settings.adapter),
                          searched=getattr(program.retriever, "searched", None))  # fmt: skip
    except Exception as exc:
        log.warning("the compiled program was not logged to MLflow: %s", exc)
        return
    log.info("compiled program logged to MLflow: %s", uri)
