"""Compiling a program by a teleprompter's name against a metric's name or a callable, as ``ragscale run`` does,
and logging it to MLflow's active run as a model that travels (``experiments/model.py``)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ragscale.experiments.model import log_program
from ragscale.optimizers.metrics import METRICS

if TYPE_CHECKING:
    import dspy

    from ragscale.programs.base import Method

log = logging.getLogger(__name__)


def compile(
    program: Method,
    trainset: Sequence[dspy.Example],
    optimizer: str | dspy.teleprompt.Teleprompter = "bootstrap",
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
    ``random-search``, ``mipro``, ``gepa``), or a teleprompter you built (``OPTIMIZERS["bootstrap"](metric=...,
    shots=4, docs_per_demo=3)``, or any DSPy one): it carries its own metric and settings, so ``metric``, ``shots``,
    ``docs_per_demo``, ``seed`` and ``threads`` are not used and ``teacher``, ``reflection_lm`` and ``options`` other
    than ``valset`` are refused; ``metric`` is ``"em"``, ``"f1"``, ``"acc"`` or your own
    ``metric(example, prediction, trace=None) -> float``. ``shots`` demonstrations per predictor, each keeping
    ``docs_per_demo`` documents; ``teacher`` (a model name or an LM) writes the traces for the bootstrap family, and
    ``reflection_lm`` rewrites GEPA's instructions. A method's grader (CRAG's, Self-RAG's) is then compiled on its
    relevance labels, as ``ragscale run`` does (``optimizers.method.compile_method``). ``options`` are the
    teleprompter's own: ``valset``, ``num_candidates``, ``max_attempts``, GEPA's ``budget``. Uses the LM and adapter
    of ``configure`` (or ``dspy.context``).

    Under an active MLflow run (``mlflow.start_run()``), the compiled program is logged to it as the model
    ``model`` (``log_model=False`` does not): ``mlflow.pyfunc.load_model("runs:/<id>/model")`` loads it back.
    """
    if isinstance(optimizer, str):
        compiled = _compile_by_name(program, trainset, optimizer, metric, shots=shots, docs_per_demo=docs_per_demo,
                                    teacher=teacher, reflection_lm=reflection_lm, seed=seed, threads=threads,
                                    **options)  # fmt: skip
    else:
        compiled = _compile_with(optimizer, program, trainset, teacher=teacher, reflection_lm=reflection_lm, **options)
    if log_model:
        _log_if_tracked(compiled)
    return compiled


def _compile_by_name(
    program: Method, trainset: Sequence[dspy.Example], optimizer: str, metric: str | Callable[..., float], *,
    teacher: str | dspy.BaseLM | None, reflection_lm: str | dspy.BaseLM | None, **settings: Any,
) -> Method:  # fmt: skip
    """``program`` compiled as ``ragscale run`` compiles it (``optimizers.method.compile_method``), the metric and
    the LMs given by name looked up."""
    from ragscale.optimizers.method import compile_method
    from ragscale.programs.lm import load_lm

    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; valid choices: {', '.join(METRICS)}, or a callable")
        metric = METRICS[metric]
    teacher, reflection_lm = (load_lm(lm) if isinstance(lm, str) else lm for lm in (teacher, reflection_lm))
    return compile_method(program, trainset, optimizer=optimizer, metric=metric, teacher_lm=teacher,
                          reflection_lm=reflection_lm, **settings)  # fmt: skip


def _compile_with(teleprompter: Any, program: Method, trainset: Sequence[dspy.Example], **given: Any) -> Method:
    """``program`` compiled by a teleprompter the caller built (``optimizers.method.compile_method_with``); a setting
    it would ignore fails, naming it."""
    from ragscale.optimizers.method import compile_method_with

    valset = given.pop("valset", None)
    ignored = sorted(name for name, value in given.items() if value is not None)
    if ignored:
        raise ValueError(f"a teleprompter built by hand carries its own settings; got {', '.join(ignored)} as well")
    return compile_method_with(teleprompter, program, trainset, valset=valset)


def _log_if_tracked(program: Method) -> None:
    """Log ``program`` to MLflow's active run, if there is one, as the model ``model``. Compiling is done by then,
    so a program that cannot be logged (a function retriever, an LM that names no model, a store that fails) is
    said so in a warning and returned all the same."""
    if "mlflow" not in sys.modules:  # no run can be active in a process that never imported MLflow
        return
    import dspy
    import mlflow

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
