"""Compiling a program by a teleprompter's name against a metric's name or a callable, as ``ragscale run`` does,
and logging it to MLflow's active run as a model that travels (``experiments/model.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)


def compile(
    program,
    trainset: Sequence,
    optimizer: str = "bootstrap",
    metric: str | Callable[..., float] = "em",
    *,
    shots: int = 4,
    docs_per_demo: int = 3,
    teacher: Any = None,
    valset: Sequence | None = None,
    seed: int = 0,
    threads: int = 1,
    log_model: bool = True,
    **options: Any,
):
    """``program`` compiled on ``trainset`` by the teleprompter ``optimizer``, judged by ``metric``; a new program.

    ``optimizer`` is one of ``ragscale.optimizers.teleprompters.OPTIMIZERS`` (``none``, ``labeled``, ``bootstrap``,
    ``random-search``, ``mipro``, ``gepa``); ``metric`` is ``"em"``, ``"f1"``, ``"acc"`` or your own
    ``metric(example, prediction, trace=None) -> float``. ``shots`` demonstrations per predictor, each keeping
    ``docs_per_demo`` documents; ``teacher`` (a model name or a ``dspy.LM``) writes the traces for the bootstrap
    family. A method's grader (CRAG's, Self-RAG's) is then compiled on its relevance labels, as ``ragscale run``
    does. ``options`` are the teleprompter's own (``num_candidates``, ``max_attempts``, ``budget``,
    ``reflection_lm``). Uses the LM and adapter of ``configure`` (or ``dspy.context``).

    Under an active MLflow run (``mlflow.start_run()``), the compiled program is logged to it as the model
    ``model`` (``log_model=False`` does not): ``mlflow.pyfunc.load_model("runs:/<id>/model")`` loads it back.
    """
    from ragscale.optimizers.graders import compile_graders
    from ragscale.optimizers.metrics import METRICS
    from ragscale.optimizers.teleprompters import compile_program
    from ragscale.programs.lm import load_lm

    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; valid choices: {', '.join(METRICS)}, or a callable")
        metric = METRICS[metric]
    teacher_lm = load_lm(teacher) if isinstance(teacher, str) else teacher
    common = {
        "shots": shots,
        "seed": seed,
        "teacher_lm": teacher_lm,
        "reflection_lm": options.pop("reflection_lm", None),
        "budget": options.get("budget"),
    }
    compiled = compile_program(
        program, list(trainset), optimizer=optimizer, metric=metric, docs_per_demo=docs_per_demo, valset=valset,
        threads=threads, **common, **options,
    )  # fmt: skip
    compiled = compile_graders(compiled, list(trainset), optimizer=optimizer, threads=threads, **common)
    if log_model:
        _log_if_tracked(compiled)
    return compiled


def _log_if_tracked(program) -> None:
    """Log ``program`` to MLflow's active run, if there is one, as the model ``model``; a program that cannot
    travel (a function retriever, an LM that names no model) is said so in a warning, never an error."""
    import sys

    if "mlflow" not in sys.modules:  # no run can be active in a process that never imported MLflow
        return
    import dspy
    import mlflow

    from ragscale.experiments.model import log_program

    if mlflow.active_run() is None:
        return
    try:
        lm, api_base = lm_reference(dspy.settings.lm)
        searched = getattr(program.retriever, "searched", None)
        uri = log_program(program, lm=lm, api_base=api_base, adapter=adapter_name(dspy.settings.adapter),
                          searched=searched)  # fmt: skip
    except ValueError as exc:
        log.warning("the compiled program was not logged to MLflow: %s", exc)
        return
    log.info("compiled program logged to MLflow: %s", uri)


def lm_reference(lm) -> tuple[str, str | None]:
    """The name ``load_lm`` loads ``lm`` again by, and its server's URL; ``ValueError`` for an LM without one."""
    model = getattr(lm, "model", None)
    if not isinstance(model, str):
        raise ValueError(f"the LM {type(lm).__name__} names no model to load again")
    if model.startswith("local/"):
        return model.removeprefix("local/"), None
    api_base = (getattr(lm, "kwargs", None) or {}).get("api_base")
    if model.startswith("openai/") and api_base:
        return model, api_base
    raise ValueError(f"the LM {model!r} is neither a local model nor an openai/<model> on a server (api_base)")


def adapter_name(adapter) -> str:
    """The name in ``ADAPTERS`` of an adapter like ``adapter`` (None: DSPy's default, ``chat``)."""
    import dspy

    from ragscale.programs.lm import FieldAdapter

    if isinstance(adapter, FieldAdapter):
        return "field-prefill" if adapter.continuation == "prefill" else "field"
    if isinstance(adapter, dspy.JSONAdapter):
        return "json"
    if adapter is None or isinstance(adapter, dspy.ChatAdapter):
        return "chat"
    raise ValueError(f"adapter {type(adapter).__name__} is none of ragscale's ADAPTERS")
